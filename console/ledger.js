// Ledger browser (auditors and admins): redemptions, refused attempts, revocations, purchase
// events and deliveries, with the API's filters, cursor paging and exports.
import {problemLine} from './api.js';
import {bytes, field, h, replace, status, table} from './dom.js';

const mono = 'mono';
const hash = 'mono hash';

const FILTERS = {
  transactionId: 'Transaction id',
  originalTransactionId: 'Original transaction id',
  productId: 'Product id',
  bundleId: 'Bundle id',
  playerId: 'Player id',
  code: 'Problem code',
  redemptionId: 'Redemption id',
  from: 'From (local time)',
  to: 'To (local time, exclusive)',
};

const CODES = ['alreadyRedeemed', 'revoked', 'signatureInvalid', 'chainUntrusted', 'bundleMismatch', 'environmentNotAllowed',
  'unknownProduct', 'transactionNotInReceipt', 'transactionRequired', 'malformed', 'unsupportedFormat', 'expired',
  'productTypeMismatch', 'appAccountTokenMismatch', 'accountMismatch', 'upgradedTransaction', 'familySharingNotAllowed'];

/** Each tab: its API path, the filters the API takes, the export kind (if any) and columns. */
const KINDS = {
  redemptions: {
    label: 'Redemptions', path: '/v1/audit/redemptions', export: 'redemptions',
    filters: ['transactionId', 'originalTransactionId', 'productId', 'bundleId', 'playerId', 'from', 'to'],
    columns: [
      {key: 'sequence', label: 'Seq'}, {key: 'redeemedAt', label: 'Redeemed (UTC)'},
      {key: 'transactionId', label: 'Transaction', className: mono}, {key: 'originalTransactionId', label: 'Original', className: mono},
      {key: 'productId', label: 'Product', className: mono}, {key: 'bundleId', label: 'Bundle', className: mono},
      {key: 'environment', label: 'Environment'}, {key: 'sourceFormat', label: 'Format'}, {key: 'quantity', label: 'Qty'},
      {key: 'playerId', label: 'Player', className: mono}, {key: 'expiresAt', label: 'Expires (UTC)'},
      {key: 'clientAddress', label: 'Client', className: mono}, {key: 'redemptionId', label: 'Redemption id', className: hash},
      {key: 'receiptSHA256', label: 'Receipt SHA-256', className: hash},
    ],
  },
  attempts: {
    label: 'Refused attempts', path: '/v1/audit/attempts', export: 'attempts',
    filters: ['transactionId', 'productId', 'code', 'from', 'to'],
    columns: [
      {key: 'sequence', label: 'Seq'}, {key: 'at', label: 'At (UTC)'}, {key: 'code', label: 'Code', className: mono},
      {key: 'detail', label: 'Detail', className: 'detail'}, {key: 'transactionId', label: 'Transaction', className: mono},
      {key: 'productId', label: 'Product', className: mono},
      {key: 'claimed', label: 'Ids', format: (v) => (v === true ? 'claimed (unverified)' : v === false ? 'verified' : '—')},
      {key: 'clientAddress', label: 'Client', className: mono}, {key: 'receiptSHA256', label: 'Receipt SHA-256', className: hash},
    ],
  },
  revocations: {
    label: 'Revocations', path: '/v1/audit/revocations', filters: [],
    columns: [
      {key: 'sequence', label: 'Seq'}, {key: 'revokedAt', label: 'Revoked (UTC)'},
      {key: 'transactionId', label: 'Transaction', className: mono}, {key: 'reason', label: 'Reason', className: 'detail'},
      {key: 'source', label: 'Source'}, {key: 'reference', label: 'Reference', className: mono},
      {key: 'environment', label: 'Environment'}, {key: 'redemptionId', label: 'Redemption id', className: hash,
        format: (v) => (v ? v : '— (not redeemed)')},
      {key: 'recordedAt', label: 'Recorded (UTC)'},
    ],
  },
  events: {
    label: 'Purchase events', path: '/v1/audit/events', filters: [],
    columns: [
      {key: 'sequence', label: 'Seq'}, {key: 'at', label: 'At (UTC)'}, {key: 'kind', label: 'Kind'},
      {key: 'transactionId', label: 'Transaction', className: mono}, {key: 'environment', label: 'Environment'},
      {key: 'replayKey', label: 'Replay key', className: mono}, {key: 'playerId', label: 'Player', className: mono},
      {key: 'expiresAt', label: 'Expires (UTC)'}, {key: 'graceUntil', label: 'Grace until (UTC)'},
      {key: 'detail', label: 'Detail', className: 'detail'}, {key: 'source', label: 'Source'},
      {key: 'reference', label: 'Reference', className: mono}, {key: 'redemptionId', label: 'Redemption id', className: hash},
    ],
  },
  deliveries: {
    label: 'Deliveries', path: '/v1/audit/deliveries', export: 'deliveries', filters: ['redemptionId'],
    columns: [
      {key: 'sequence', label: 'Seq'}, {key: 'redemptionId', label: 'Redemption id', className: hash},
      {key: 'assetId', label: 'Asset', className: mono}, {key: 'firstAt', label: 'First (UTC)'}, {key: 'lastAt', label: 'Last (UTC)'},
      {key: 'downloads', label: 'Downloads'}, {key: 'completed', label: 'Completed'},
      {key: 'bytesServed', label: 'Bytes served', format: (v) => bytes(v)}, {key: 'complete', label: 'Whole object'},
      {key: 'sha256', label: 'SHA-256', className: hash},
    ],
  },
};

// The tab and filters, kept while moving between pages; sign-out forgets them.
const memory = {kind: 'redemptions', filters: {}, pageSize: 100};

/** A datetime-local value (the browser's local time) as ISO 8601 UTC; '' stays ''. */
function toISO(local) {
  if (!local) return '';
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? local : date.toISOString().replace(/\.000Z$/, 'Z');
}

function describe(filters) {
  const parts = Object.entries(filters).map(([name, value]) => `${name} = ${value}`);
  return parts.length ? ` · ${parts.join(', ')}` : '';
}

function stamp() {
  return new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
}

export function mountLedger(container, {api}) {
  let kind = memory.kind;
  // cursors[i] is the cursor that loads page i (undefined: the first page).
  let cursors = [undefined];
  let page = 0;
  let nextCursor = null;
  let loading = null;

  const tabs = h('div', {class: 'tabs', role: 'tablist', 'aria-label': 'Ledger tables'});
  const filterGrid = h('div', {class: 'form-grid filters'});
  const applyButton = h('button', {type: 'submit', id: 'ledger-apply', data: {test: 'ledger-apply'}}, 'Apply filters');
  const resetButton = h('button', {type: 'button', class: 'secondary', id: 'ledger-reset', data: {test: 'ledger-reset'}}, 'Clear filters');
  const filterForm = h('form', {id: 'ledger-filters', class: 'filter-form', novalidate: true, data: {test: 'ledger-filters'}},
    filterGrid, h('div', {class: 'actions'}, applyButton, resetButton));
  const ledgerStatus = h('p', {id: 'ledger-status', class: 'status', role: 'status', hidden: true, data: {test: 'ledger-status'}});
  const holder = h('div', {id: 'ledger-table', role: 'tabpanel', data: {test: 'ledger-table-holder'}});
  const prevButton = h('button', {type: 'button', class: 'secondary', id: 'ledger-prev', data: {test: 'ledger-prev'}}, '← Previous page');
  const nextButton = h('button', {type: 'button', class: 'secondary', id: 'ledger-next', data: {test: 'ledger-next'}}, 'Next page →');
  const pageSize = h('input', {id: 'ledger-page-size', name: 'limit', type: 'number', min: 1, max: 1000, step: 1, inputMode: 'numeric',
    value: memory.pageSize, class: 'page-size', data: {test: 'ledger-page-size'}});
  const pageLabel = h('span', {class: 'page-label', data: {test: 'ledger-page'}});
  const csvButton = h('button', {type: 'button', class: 'secondary', id: 'export-csv', data: {test: 'export-csv'}}, 'Export CSV');
  const ndjsonButton = h('button', {type: 'button', class: 'secondary', id: 'export-ndjson', data: {test: 'export-ndjson'}}, 'Export NDJSON');
  const exportStatus = h('p', {id: 'export-status', class: 'status', role: 'status', hidden: true, data: {test: 'export-status'}});
  const exportNote = h('p', {class: 'hint'});

  /** The filter inputs as typed (dates in local time). */
  function rawFilters() {
    const out = {};
    for (const name of KINDS[kind].filters) out[name] = filterGrid.querySelector(`[name="${name}"]`)?.value.trim() ?? '';
    return out;
  }

  /** The applied filters of this tab as the API takes them (dates in ISO 8601 UTC), empty ones left out. */
  function appliedFilters() {
    const out = {};
    for (const name of KINDS[kind].filters) {
      const value = memory.filters[name];
      if (value) out[name] = name === 'from' || name === 'to' ? toISO(value) : value;
    }
    return out;
  }

  function renderTabs() {
    holder.setAttribute('aria-labelledby', `ledger-tab-${kind}`);
    replace(tabs, Object.entries(KINDS).map(([id, k]) => h('button', {
      type: 'button', role: 'tab', id: `ledger-tab-${id}`, 'aria-selected': String(id === kind),
      'aria-controls': 'ledger-table', tabIndex: id === kind ? 0 : -1,
      data: {test: `ledger-tab-${id}`}, on: {click: () => selectKind(id)},
    }, k.label)));
  }

  function renderFilters() {
    const k = KINDS[kind];
    replace(filterGrid, k.filters.map((name) => {
      const input = h('input', {id: `filter-${name}`, name, autocomplete: 'off', spellcheck: false, data: {test: `filter-${name}`},
        value: memory.filters[name] ?? ''});
      if (name === 'from' || name === 'to') { input.type = 'datetime-local'; input.step = 1; }
      if (name === 'code') input.setAttribute('list', 'filter-codes');
      return field(FILTERS[name], input);
    }), k.filters.includes('code') ? h('datalist', {id: 'filter-codes'}, CODES.map((c) => h('option', {value: c}))) : null);
    filterForm.hidden = k.filters.length === 0;
    const exportable = Boolean(k.export);
    csvButton.hidden = !exportable;
    ndjsonButton.hidden = !exportable;
    exportNote.textContent = exportable
      ? 'Exports cover every matching row (all pages), fetched with your key and saved by the browser.'
      : 'This table has no export of its own; the chained export on the Chain status page has every event.';
  }

  function selectKind(id) {
    if (id === kind) return;
    kind = id;
    memory.kind = id;
    cursors = [undefined];
    page = 0;
    renderTabs();
    renderFilters();
    status(exportStatus, 'info', '');
    load();
    document.getElementById(`ledger-tab-${id}`)?.focus();
  }

  tabs.addEventListener('keydown', (event) => {
    const ids = Object.keys(KINDS);
    const at = ids.indexOf(kind);
    if (event.key === 'ArrowRight') selectKind(ids[(at + 1) % ids.length]);
    else if (event.key === 'ArrowLeft') selectKind(ids[(at - 1 + ids.length) % ids.length]);
  });

  async function load() {
    const k = KINDS[kind];
    const filters = appliedFilters();
    const query = {...filters, limit: memory.pageSize, cursor: cursors[page]};
    const token = {};
    loading = token;
    prevButton.disabled = true;
    nextButton.disabled = true;
    status(ledgerStatus, 'busy', 'Loading…', 'loading');
    try {
      const result = await api.get(k.path, query);
      if (loading !== token) return;
      const items = result.items ?? [];
      nextCursor = result.nextCursor ?? null;
      replace(holder, table({
        caption: `${k.label}, page ${page + 1} (oldest first)${describe(filters)}`,
        test: 'ledger-table',
        rows: items,
        rowData: (row) => ({sequence: row.sequence, transactionId: row.transactionId}),
        columns: k.columns,
        empty: 'No rows match.',
      }));
      holder.firstChild.querySelector('table').dataset.kind = kind;
      prevButton.disabled = page === 0;
      nextButton.disabled = !nextCursor;
      pageLabel.textContent = `Page ${page + 1} · ${items.length} row${items.length === 1 ? '' : 's'}${nextCursor ? ' · more' : ''}`;
      status(ledgerStatus, 'info', '', 'loaded');
    } catch (error) {
      if (loading !== token) return;
      replace(holder);
      pageLabel.textContent = '';
      prevButton.disabled = page === 0;
      status(ledgerStatus, 'problem', problemLine(error), 'error');
    }
  }

  pageSize.addEventListener('change', () => {
    if (pageSize.value === '') return;
    const n = Number(pageSize.value);
    if (!Number.isInteger(n) || n < 1 || n > 1000) {
      status(ledgerStatus, 'problem', 'Rows per page: 1 to 1000.', 'error');
      return;
    }
    if (n === memory.pageSize) return;
    memory.pageSize = n;
    cursors = [undefined];
    page = 0;
    load();
  });
  filterForm.addEventListener('submit', (event) => {
    event.preventDefault();
    memory.filters = {...memory.filters, ...rawFilters()};
    cursors = [undefined];
    page = 0;
    load();
  });
  resetButton.addEventListener('click', () => {
    memory.filters = {};
    renderFilters();
    cursors = [undefined];
    page = 0;
    load();
  });
  nextButton.addEventListener('click', () => {
    if (!nextCursor) return;
    cursors[page + 1] = nextCursor;
    page += 1;
    load();
  });
  prevButton.addEventListener('click', () => {
    if (page === 0) return;
    page -= 1;
    load();
  });

  async function exportAs(format) {
    const k = KINDS[kind];
    if (!k.export) return;
    const buttons = [csvButton, ndjsonButton];
    for (const b of buttons) b.disabled = true;
    const fileName = `coffer-${k.export}-${stamp()}.${format === 'csv' ? 'csv' : 'ndjson'}`;
    status(exportStatus, 'busy', `Exporting ${k.label.toLowerCase()} as ${format.toUpperCase()}…`, 'exporting');
    try {
      const size = await api.download('/v1/audit/export', {format, kind: k.export, ...appliedFilters()}, fileName);
      status(exportStatus, 'ok', `Saved ${fileName} (${bytes(size)}).`, 'done');
    } catch (error) {
      status(exportStatus, 'problem', `Export failed: ${problemLine(error)}`, 'error');
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }
  csvButton.addEventListener('click', () => exportAs('csv'));
  ndjsonButton.addEventListener('click', () => exportAs('ndjson'));

  replace(container,
    h('h1', {text: 'Ledger'}),
    h('section', {class: 'card', 'aria-label': 'Ledger browser'},
      tabs, filterForm,
      h('div', {class: 'pager'}, prevButton, pageLabel, nextButton,
        h('div', {class: 'page-size-field'}, h('label', {htmlFor: 'ledger-page-size', text: 'Rows per page'}), pageSize)),
      ledgerStatus, holder,
      h('div', {class: 'export'}, h('div', {class: 'actions'}, csvButton, ndjsonButton), exportNote, exportStatus)));
  renderTabs();
  renderFilters();
  load();
  return () => { loading = null; };
}

/** Forget the filters (on sign-out). */
export function resetLedgerMemory() {
  memory.kind = 'redemptions';
  memory.filters = {};
  memory.pageSize = 100;
}
