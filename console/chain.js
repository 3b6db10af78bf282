// Chain status: the latest signed checkpoint, verified in the browser (WebCrypto Ed25519)
// against the public key the server presents.
import {ApiError, problemLine} from './api.js';
import {h, replace, status} from './dom.js';

function fromBase64(text) {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) out[i] = binary.charCodeAt(i);
  return out;
}

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The bytes the server signs (CofferCore LedgerCheckpoint.message):
 * `coffer-checkpoint-v1\nsequence=<n>\nentryHash=<hex>\ntime=<unix seconds>\n`, UTF-8.
 */
export function checkpointMessage({sequence, entryHash, time}) {
  return new TextEncoder().encode(`coffer-checkpoint-v1\nsequence=${sequence}\nentryHash=${entryHash}\ntime=${time}\n`);
}

/** 'valid', 'invalid', or 'unsupported' (this browser or page cannot verify Ed25519). */
export async function verifyCheckpoint(checkpoint, publicKeyBase64) {
  if (!globalThis.crypto?.subtle) return {state: 'unsupported', why: 'WebCrypto is only available on secure (HTTPS) or localhost pages'};
  if (!Number.isSafeInteger(checkpoint.sequence) || !Number.isSafeInteger(checkpoint.time)
    || typeof checkpoint.entryHash !== 'string' || typeof checkpoint.signature !== 'string') {
    return {state: 'invalid', why: 'the checkpoint is not well-formed'};
  }
  let raw;
  let signature;
  try {
    raw = fromBase64(publicKeyBase64);
    signature = fromBase64(checkpoint.signature);
  } catch {
    return {state: 'invalid', why: 'the key or signature is not base64'};
  }
  if (raw.length !== 32) return {state: 'invalid', why: `the public key is ${raw.length} bytes, not 32`};
  if (signature.length !== 64) return {state: 'invalid', why: `the signature is ${signature.length} bytes, not 64`};
  let key;
  try {
    key = await crypto.subtle.importKey('raw', raw, {name: 'Ed25519'}, false, ['verify']);
  } catch (error) {
    if (error?.name === 'NotSupportedError') return {state: 'unsupported', why: 'this browser has no Ed25519 in WebCrypto'};
    return {state: 'invalid', why: `the public key was refused (${error?.name ?? error})`};
  }
  const ok = await crypto.subtle.verify({name: 'Ed25519'}, key, signature, checkpointMessage(checkpoint));
  return ok ? {state: 'valid'} : {state: 'invalid', why: 'the signature does not match the checkpoint'};
}

/** The server's key id: the first 8 bytes of SHA-256 of the raw key, in hex (LedgerSigner.keyId). */
async function keyIdOf(publicKeyBase64) {
  if (!globalThis.crypto?.subtle) return null;
  return hex(await crypto.subtle.digest('SHA-256', fromBase64(publicKeyBase64))).slice(0, 16);
}

function stamp() {
  return new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
}

// An expected key id typed by the user, kept in memory while the console is open.
let expectedKeyId = '';

export function mountChain(container, {api}) {
  let mounted = true;
  const verdict = h('p', {id: 'chain-status', class: 'verdict', role: 'status', data: {test: 'chain-status', state: 'loading'}, text: 'Loading…'});
  const facts = h('dl', {class: 'facts', data: {test: 'chain-facts'}});
  const keyFacts = h('dl', {class: 'facts', data: {test: 'chain-key'}});
  const expected = h('input', {id: 'chain-expected-key', name: 'expectedKeyId', autocomplete: 'off', spellcheck: false,
    placeholder: '16 hex digits', value: expectedKeyId, data: {test: 'chain-expected-key'}, maxLength: 64});
  const expectedResult = h('p', {class: 'status', hidden: true, role: 'status', data: {test: 'chain-expected-result'}});
  const refreshButton = h('button', {type: 'button', class: 'secondary', data: {test: 'chain-refresh'}}, 'Check again');
  const exportButton = h('button', {type: 'button', class: 'secondary', data: {test: 'chain-export'}}, 'Download the chained export (NDJSON)');
  const exportStatus = h('p', {class: 'status', hidden: true, role: 'status', data: {test: 'chain-export-status'}});
  let serverKeyId = null;

  function fact(list, term, value, test, className) {
    list.append(h('dt', {text: term}), h('dd', {class: className, data: {test}, text: value}));
  }

  function compareExpected() {
    expectedKeyId = expected.value.trim().toLowerCase();
    if (!expectedKeyId || !serverKeyId) { status(expectedResult, 'info', ''); return; }
    if (expectedKeyId === serverKeyId) status(expectedResult, 'ok', 'The server presents the key you expected.', 'match');
    else status(expectedResult, 'problem', `The server presents key ${serverKeyId}, not ${expectedKeyId}.`, 'mismatch');
  }
  expected.addEventListener('input', compareExpected);

  async function check() {
    refreshButton.disabled = true;
    verdict.dataset.state = 'loading';
    verdict.className = 'verdict';
    verdict.textContent = 'Loading…';
    replace(facts);
    replace(keyFacts);
    try {
      const [checkpoint, key] = await Promise.all([
        api.get('/v1/audit/checkpoints/latest').catch((error) => {
          if (error instanceof ApiError && error.code === 'noCheckpoint') return null;
          throw error;
        }),
        api.get('/v1/audit/public-key'),
      ]);
      if (!mounted) return;
      const computedKeyId = await keyIdOf(key.publicKey);
      // What the key hashes to, never what the server claims it is (null when this browser
      // cannot compute it: then nothing is compared).
      serverKeyId = computedKeyId;
      fact(keyFacts, 'Algorithm', key.algorithm, 'key-algorithm');
      fact(keyFacts, 'Key id', key.keyId, 'key-id', 'mono');
      fact(keyFacts, 'Public key (base64, raw 32 bytes)', key.publicKey, 'key-public', 'mono hash-wrap');
      if (computedKeyId && computedKeyId !== key.keyId) fact(keyFacts, 'Key id check', `MISMATCH: the key hashes to ${computedKeyId}`, 'key-id-check', 'bad');
      compareExpected();
      if (!checkpoint) {
        verdict.dataset.state = 'none';
        verdict.className = 'verdict none';
        verdict.textContent = 'No checkpoint yet: the server signs one when the ledger has grown for the checkpoint interval.';
        return;
      }
      const result = computedKeyId && computedKeyId !== key.keyId
        ? {state: 'invalid', why: `the server calls its key ${key.keyId}, but the key hashes to ${computedKeyId}`}
        : checkpoint.keyId === key.keyId
          ? await verifyCheckpoint(checkpoint, key.publicKey)
          : {state: 'invalid', why: `signed by key ${checkpoint.keyId}, the server presents ${key.keyId}`};
      if (!mounted) return;
      verdict.dataset.state = result.state;
      verdict.className = `verdict ${result.state}`;
      verdict.textContent = result.state === 'valid'
        ? 'Signature valid: the latest checkpoint was signed by the key this server presents.'
        : result.state === 'unsupported'
          ? `Not verified here: ${result.why}.`
          : `INVALID: ${result.why}.`;
      fact(facts, 'Sequence', String(checkpoint.sequence), 'chain-sequence', 'mono');
      const when = Number.isSafeInteger(checkpoint.time) ? new Date(checkpoint.time * 1000).toISOString().replace('.000Z', 'Z') : '?';
      fact(facts, 'Signed at', `${when} (unix ${checkpoint.time})`, 'chain-time');
      fact(facts, 'Key id', checkpoint.keyId, 'chain-keyid', 'mono');
      fact(facts, 'Entry hash', checkpoint.entryHash, 'chain-entryhash', 'mono hash-wrap');
      fact(facts, 'Signature', checkpoint.signature, 'chain-signature', 'mono hash-wrap');
    } catch (error) {
      if (!mounted) return;
      verdict.dataset.state = 'error';
      verdict.className = 'verdict invalid';
      verdict.textContent = problemLine(error);
    } finally {
      refreshButton.disabled = false;
    }
  }

  refreshButton.addEventListener('click', check);
  exportButton.addEventListener('click', async () => {
    exportButton.disabled = true;
    const fileName = `coffer-ledger-${stamp()}.ndjson`;
    status(exportStatus, 'busy', 'Exporting the chained ledger…', 'exporting');
    try {
      await api.download('/v1/audit/export', {kind: 'ledger', format: 'ndjson'}, fileName);
      status(exportStatus, 'ok', `Saved ${fileName}. Check it offline: coffer ledger verify --export ${fileName} --public-key YOUR-PINNED-KEY`, 'done');
    } catch (error) {
      status(exportStatus, 'problem', `Export failed: ${problemLine(error)}`, 'error');
    } finally {
      exportButton.disabled = false;
    }
  });

  replace(container,
    h('h1', {text: 'Chain status'}),
    h('section', {class: 'card', 'aria-labelledby': 'checkpoint-title'},
      h('div', {class: 'card-head'}, h('h2', {id: 'checkpoint-title', text: 'Latest checkpoint'}), refreshButton),
      verdict, facts,
      h('p', {class: 'note', data: {test: 'chain-note'}},
        'What this proves, and what it does not: the signature is checked against the public key this same server presents, '
        + 'so it shows the checkpoint is intact and signed by that key — not that the key is the one you trust. Someone who controls '
        + 'the server can present another key. Compare the key id with a copy you saved earlier, and verify the whole chain '
        + 'against a key you pinned: ',
        h('code', {text: 'coffer audit verify --server URL --public-key KEY [--checkpoint SAVED]'}),
        ' (or offline, on an export: ', h('code', {text: 'coffer ledger verify --export FILE --public-key KEY'}), ').')),
    h('section', {class: 'card', 'aria-labelledby': 'key-title'},
      h('h2', {id: 'key-title', text: 'Checkpoint signing key'}), keyFacts,
      h('div', {class: 'form-grid'},
        h('div', {class: 'field'}, h('label', {htmlFor: 'chain-expected-key', text: 'Key id you expect (optional, not stored)'}), expected)),
      expectedResult),
    h('section', {class: 'card', 'aria-labelledby': 'export-title'},
      h('h2', {id: 'export-title', text: 'Chained export'}),
      h('p', {text: 'Every ledger event with its hash, and the signed checkpoints: the file coffer ledger verify --export checks.'}),
      h('div', {class: 'actions'}, exportButton), exportStatus));
  check();
  return () => { mounted = false; };
}
