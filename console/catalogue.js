// Catalogue (admins only): assets with upload progress, asset versions, products.
import {problemLine, segment} from './api.js';
import {bytes, field, h, replace, status, table} from './dom.js';

/** Above this size the file is not read into memory to compute its Content-Digest. */
const DIGEST_LIMIT = 256 * 1024 * 1024;
const TYPES = ['consumable', 'nonConsumable', 'autoRenewable', 'nonRenewing'];

function base64(buffer) {
  let text = '';
  for (const byte of new Uint8Array(buffer)) text += String.fromCharCode(byte);
  return btoa(text);
}

function hex(buffer) {
  return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
}

/** An asset id from a file name: the allowed characters only. */
function idFromFileName(name) {
  const stem = name.replace(/\.[^.]*$/, '') || name;
  return stem.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^[-.]+|[-.]+$/g, '').slice(0, 128);
}

export function mountCatalogue(container, {api}) {
  const state = {assets: [], products: [], mounted: true};

  // ── Upload ────────────────────────────────────────────────────────────────────────────
  const assetIdInput = h('input', {id: 'upload-asset-id', name: 'assetId', required: true, autocomplete: 'off', spellcheck: false,
    pattern: '[A-Za-z0-9._\\-]{1,128}', maxLength: 128, data: {test: 'upload-asset-id'}});
  const fileInput = h('input', {id: 'upload-file', name: 'file', type: 'file', required: true, data: {test: 'upload-file'}});
  const uploadButton = h('button', {type: 'submit', id: 'upload-submit', data: {test: 'upload-submit'}}, 'Upload');
  const cancelButton = h('button', {type: 'button', class: 'secondary', id: 'upload-cancel', hidden: true, data: {test: 'upload-cancel'}}, 'Cancel');
  const progress = h('progress', {id: 'upload-progress', max: 100, value: 0, data: {test: 'upload-progress'}, 'aria-label': 'Upload progress'});
  const progressText = h('p', {id: 'upload-progress-text', class: 'mono small', data: {test: 'upload-progress-text'}, 'aria-live': 'polite'});
  const uploadStatus = h('p', {id: 'upload-status', class: 'status', hidden: true, role: 'status', data: {test: 'upload-status', state: 'idle'}});
  const progressRow = h('div', {class: 'wide upload-progress', hidden: true}, progress, progressText);
  let cancelUpload = null;

  fileInput.addEventListener('change', () => {
    const file = fileInput.files?.[0];
    if (file && !assetIdInput.value) assetIdInput.value = idFromFileName(file.name);
  });

  const uploadForm = h('form', {id: 'upload-form', class: 'form-grid', novalidate: true, data: {test: 'upload-form', admin: ''},
    on: {submit: (event) => { event.preventDefault(); upload(); }}},
  field('Asset id', assetIdInput, 'A–Z a–z 0–9 . _ -; uploading to an existing id adds a version.'),
  field('File', fileInput, 'Sent with its name, type and a SHA-256 Content-Digest (files up to 256 MiB).'),
  h('div', {class: 'actions wide'}, uploadButton, cancelButton),
  progressRow,
  h('div', {class: 'wide'}, uploadStatus));

  async function upload() {
    const file = fileInput.files?.[0];
    const assetId = assetIdInput.value.trim();
    if (!assetId || !file) {
      status(uploadStatus, 'problem', 'Choose an asset id and a file.', 'error');
      return;
    }
    let id;
    try { id = segment(assetId); } catch (error) { status(uploadStatus, 'problem', problemLine(error), 'error'); return; }
    uploadButton.disabled = true;
    progressRow.hidden = false;
    progress.value = 0;
    progressText.textContent = '';
    const headers = {'Content-Type': file.type || 'application/octet-stream'};
    let digestHex = null;
    try {
      if (file.size <= DIGEST_LIMIT && globalThis.crypto?.subtle) {
        status(uploadStatus, 'busy', `Computing the SHA-256 of ${file.name} (${bytes(file.size)})…`, 'hashing');
        const digest = await crypto.subtle.digest('SHA-256', await file.arrayBuffer());
        headers['Content-Digest'] = `sha-256=:${base64(digest)}:`;
        digestHex = hex(digest);
      }
      status(uploadStatus, 'busy', `Uploading ${file.name}…`, 'uploading');
      cancelButton.hidden = false;
      const started = performance.now();
      const asset = await api.upload(`/v1/admin/assets/${id}`, {name: file.name}, file, {
        headers,
        onAbortable: (abort) => { cancelUpload = abort; },
        onProgress: (loaded, total) => {
          const seconds = Math.max((performance.now() - started) / 1000, 0.001);
          const percent = total ? Math.floor((loaded / total) * 100) : 0;
          progress.value = percent;
          progressText.textContent = `${bytes(loaded)} of ${bytes(total)} (${percent}%) · ${bytes(loaded / seconds)}/s`;
        },
      });
      progress.value = 100;
      const seconds = Math.max((performance.now() - started) / 1000, 0.001);
      progressText.textContent = `${bytes(file.size)} of ${bytes(file.size)} (100%) · ${bytes(file.size / seconds)}/s`;
      const checked = digestHex ? (asset?.sha256 === digestHex ? ' · digest checked by the server' : ' · DIGEST DIFFERS') : ' · sent without a digest';
      status(uploadStatus, 'ok', `Done: ${asset?.assetId} version ${asset?.version}, ${bytes(asset?.size)}, sha256 ${asset?.sha256}${checked}`, 'done');
      fileInput.value = '';
      await refresh();
    } catch (error) {
      status(uploadStatus, 'problem', `Upload failed: ${problemLine(error)}`, 'error');
    } finally {
      cancelUpload = null;
      cancelButton.hidden = true;
      uploadButton.disabled = false;
    }
  }
  cancelButton.addEventListener('click', () => cancelUpload?.());

  // ── Assets ────────────────────────────────────────────────────────────────────────────
  const assetsStatus = h('p', {class: 'status', hidden: true, role: 'status', data: {test: 'assets-status'}});
  const assetsHolder = h('div', {data: {test: 'assets'}});
  const versionsPanel = h('div', {id: 'asset-versions', class: 'panel', hidden: true, data: {test: 'asset-versions'}, 'aria-live': 'polite'});

  function renderAssets() {
    replace(assetsHolder, table({
      caption: 'Assets (latest version of each)',
      test: 'assets-table',
      rows: state.assets,
      rowData: (a) => ({assetId: a.assetId}),
      columns: [
        {key: 'assetId', label: 'Asset id', className: 'mono'},
        {key: 'version', label: 'Version'},
        {key: 'name', label: 'Name'},
        {key: 'contentType', label: 'Type'},
        {key: 'size', label: 'Size', format: (v) => bytes(v)},
        {key: 'sha256', label: 'SHA-256', className: 'mono hash'},
        {key: 'createdAt', label: 'Uploaded (UTC)'},
      ],
      actions: (a) => h('button', {type: 'button', class: 'small secondary', data: {test: 'asset-versions-button', admin: ''},
        'aria-label': `Versions of ${a.assetId}`, on: {click: () => showVersions(a.assetId)}}, 'Versions'),
      empty: 'No assets yet: upload one above.',
    }));
  }

  /** Every stored version of an asset, newest first (GET /v1/admin/assets/{id}/versions). */
  async function showVersions(assetId) {
    versionsPanel.hidden = false;
    replace(versionsPanel, h('p', {class: 'status busy', text: `Loading the versions of ${assetId}…`}));
    try {
      const versions = await api.get(`/v1/admin/assets/${segment(assetId)}/versions`);
      const rows = (Array.isArray(versions) ? versions : []).map((v) => ({...v, size: bytes(v.size)}));
      replace(versionsPanel,
        h('div', {class: 'panel-head'},
          h('h3', {text: `Versions of ${assetId}`}),
          h('button', {type: 'button', class: 'small secondary', on: {click: () => { versionsPanel.hidden = true; }}}, 'Close')),
        table({
          caption: 'Every version (newest first); new downloads get the latest, tokens already issued keep theirs',
          test: 'asset-versions-table',
          rows,
          columns: [
            {key: 'version', label: 'Version'},
            {key: 'name', label: 'Name'},
            {key: 'contentType', label: 'Type'},
            {key: 'size', label: 'Size'},
            {key: 'createdAt', label: 'Stored (UTC)'},
            {key: 'sha256', label: 'SHA-256', className: 'mono'},
          ],
          empty: 'No version of this asset is stored.',
        }));
    } catch (error) {
      replace(versionsPanel, h('p', {class: 'status problem', text: problemLine(error)}));
    }
  }

  // ── Products ──────────────────────────────────────────────────────────────────────────
  const productsStatus = h('p', {class: 'status', hidden: true, role: 'status', data: {test: 'products-status'}});
  const productsHolder = h('div', {data: {test: 'products'}});

  const pid = h('input', {id: 'product-id', name: 'productId', required: true, autocomplete: 'off', spellcheck: false, maxLength: 128,
    pattern: '[A-Za-z0-9._\\-]{1,128}', data: {test: 'product-id'}});
  const bundle = h('input', {id: 'product-bundle', name: 'bundleId', required: true, autocomplete: 'off', spellcheck: false, maxLength: 128,
    list: 'product-bundles', data: {test: 'product-bundle'}});
  const bundles = h('datalist', {id: 'product-bundles'});
  const type = h('select', {id: 'product-type', name: 'type', data: {test: 'product-type'}},
    TYPES.map((t) => h('option', {value: t}, t)));
  const title = h('input', {id: 'product-title', name: 'title', required: true, maxLength: 256, autocomplete: 'off', data: {test: 'product-title'}});
  const duration = h('input', {id: 'product-duration', name: 'durationSeconds', type: 'number', min: 60, step: 1, inputMode: 'numeric',
    data: {test: 'product-duration'}});
  const durationField = field('Duration (seconds)', duration, 'nonRenewing only: 60 s to 10 years.');
  const family = h('input', {id: 'product-family', name: 'familyShareable', type: 'checkbox', data: {test: 'product-family'}});
  const assetChoices = h('div', {class: 'choices', id: 'product-assets', data: {test: 'product-assets'}});
  const saveButton = h('button', {type: 'submit', id: 'product-submit', data: {test: 'product-submit'}}, 'Save product');
  const resetButton = h('button', {type: 'button', class: 'secondary', on: {click: () => fillForm(null)}}, 'Clear');

  function syncDuration() {
    const on = type.value === 'nonRenewing';
    durationField.hidden = !on;
    duration.required = on;
  }
  type.addEventListener('change', syncDuration);

  const productForm = h('form', {id: 'product-form', class: 'form-grid', novalidate: true, data: {test: 'product-form', admin: ''},
    on: {submit: (event) => { event.preventDefault(); saveProduct(); }}},
  field('Product id (App Store)', pid),
  field('Bundle id', bundle, 'One of the bundle ids this server verifies.'),
  bundles,
  field('Type', type),
  field('Title', title),
  durationField,
  h('div', {class: 'field check'}, family, h('label', {htmlFor: 'product-family', text: 'Family shareable'})),
  h('fieldset', {class: 'wide'}, h('legend', {text: 'Assets it unlocks'}), assetChoices),
  h('div', {class: 'actions wide'}, saveButton, resetButton),
  h('div', {class: 'wide'}, productsStatus));

  function renderAssetChoices(selected) {
    const keep = selected ?? new Set([...assetChoices.querySelectorAll('input:checked')].map((i) => i.value));
    replace(assetChoices, state.assets.length === 0
      ? h('p', {class: 'hint', text: 'No assets yet.'})
      : state.assets.map((a, i) => h('div', {class: 'check'},
        h('input', {type: 'checkbox', id: `product-asset-${i}`, value: a.assetId, checked: keep.has(a.assetId),
          data: {test: 'product-asset', assetId: a.assetId}}),
        h('label', {htmlFor: `product-asset-${i}`}, h('span', {class: 'mono', text: a.assetId}), ` — ${a.name} (v${a.version})`))));
  }

  function fillForm(product) {
    pid.value = product?.productId ?? '';
    bundle.value = product?.bundleId ?? state.products[0]?.bundleId ?? '';
    type.value = product?.type ?? 'nonConsumable';
    title.value = product?.title ?? '';
    duration.value = product?.durationSeconds ?? '';
    family.checked = Boolean(product?.familyShareable);
    renderAssetChoices(new Set(product?.assetIds ?? []));
    syncDuration();
    status(productsStatus, 'info', product ? `Editing ${product.productId}: save to replace it.` : '');
    if (product) pid.focus();
  }

  async function saveProduct() {
    const productId = pid.value.trim();
    const body = {
      bundleId: bundle.value.trim(),
      type: type.value,
      title: title.value.trim(),
      assetIds: [...assetChoices.querySelectorAll('input:checked')].map((i) => i.value),
    };
    if (family.checked) body.familyShareable = true;
    if (type.value === 'nonRenewing') body.durationSeconds = Number(duration.value);
    if (!productId || !body.bundleId || !body.title) {
      status(productsStatus, 'problem', 'Product id, bundle id and title are required.', 'error');
      return;
    }
    saveButton.disabled = true;
    try {
      const saved = await api.put(`/v1/admin/products/${segment(productId)}`, body);
      await refresh();
      status(productsStatus, 'ok', `Saved ${saved.productId} (${saved.type}, ${saved.assetIds.length} asset${saved.assetIds.length === 1 ? '' : 's'}).`, 'saved');
    } catch (error) {
      status(productsStatus, 'problem', `Not saved: ${problemLine(error)}`, 'error');
    } finally {
      saveButton.disabled = false;
    }
  }

  function deleteButton(product) {
    let armed = null;
    const button = h('button', {type: 'button', class: 'small danger', data: {test: 'product-delete', admin: ''},
      'aria-label': `Delete ${product.productId}`}, 'Delete');
    button.addEventListener('click', async () => {
      if (!armed) {
        button.textContent = 'Confirm delete';
        button.dataset.state = 'confirm';
        armed = setTimeout(() => { armed = null; button.textContent = 'Delete'; delete button.dataset.state; }, 5000);
        return;
      }
      clearTimeout(armed);
      button.disabled = true;
      try {
        await api.delete(`/v1/admin/products/${segment(product.productId)}`);
        status(productsStatus, 'ok', `Deleted ${product.productId}.`, 'deleted');
        await refresh();
      } catch (error) {
        status(productsStatus, 'problem', `Not deleted: ${problemLine(error)}`, 'error');
        button.disabled = false;
      }
    });
    return button;
  }

  function renderProducts() {
    replace(productsHolder, table({
      caption: 'Products',
      test: 'products-table',
      rows: state.products,
      rowData: (p) => ({productId: p.productId}),
      columns: [
        {key: 'productId', label: 'Product id', className: 'mono'},
        {key: 'type', label: 'Type'},
        {key: 'title', label: 'Title'},
        {key: 'bundleId', label: 'Bundle id', className: 'mono'},
        {key: 'assetIds', label: 'Assets', className: 'mono'},
        {key: 'familyShareable', label: 'Family'},
        {key: 'durationSeconds', label: 'Duration (s)'},
        {key: 'updatedAt', label: 'Updated (UTC)'},
      ],
      actions: (p) => [
        h('button', {type: 'button', class: 'small secondary', data: {test: 'product-edit', admin: ''}, 'aria-label': `Edit ${p.productId}`,
          on: {click: () => fillForm(p)}}, 'Edit'),
        ' ',
        deleteButton(p),
      ],
      empty: 'No products yet.',
    }));
    replace(bundles, [...new Set(state.products.map((p) => p.bundleId))].map((b) => h('option', {value: b})));
    if (!bundle.value && state.products[0]) bundle.value = state.products[0].bundleId;
  }

  async function refresh() {
    try {
      const [assets, products] = await Promise.all([api.get('/v1/admin/assets'), api.get('/v1/admin/products')]);
      if (!state.mounted) return;
      state.assets = [...assets].sort((a, b) => a.assetId.localeCompare(b.assetId));
      state.products = [...products].sort((a, b) => a.productId.localeCompare(b.productId));
      renderAssets();
      renderAssetChoices();
      renderProducts();
      status(assetsStatus, 'info', '');
    } catch (error) {
      status(assetsStatus, 'problem', problemLine(error), 'error');
    }
  }

  replace(container,
    h('h1', {text: 'Catalogue'}),
    h('div', {class: 'grid-2'},
      h('section', {class: 'card', 'aria-labelledby': 'upload-title', data: {admin: ''}},
        h('h2', {id: 'upload-title', text: 'Upload an asset'}), uploadForm),
      h('section', {class: 'card', 'aria-labelledby': 'product-form-title', data: {admin: ''}},
        h('h2', {id: 'product-form-title', text: 'Put a product'}), productForm)),
    h('section', {class: 'card', 'aria-labelledby': 'products-title'},
      h('div', {class: 'card-head'}, h('h2', {id: 'products-title', text: 'Products'}),
        h('button', {type: 'button', class: 'small secondary', data: {test: 'catalogue-refresh'}, on: {click: refresh}}, 'Refresh')),
      productsHolder),
    h('section', {class: 'card', 'aria-labelledby': 'assets-title'},
      h('h2', {id: 'assets-title', text: 'Assets'}), assetsStatus, assetsHolder, versionsPanel));

  fillForm(null);
  refresh();
  return () => { state.mounted = false; };
}
