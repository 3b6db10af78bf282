// DOM building without innerHTML: every piece of server data reaches the page as text.

const SVG_NS = 'http://www.w3.org/2000/svg';

// Properties set as DOM properties (typed), everything else as attributes. `style` is
// refused outright: the Content-Security-Policy forbids style attributes (use a class, or
// CSSOM on `el.style`).
const PROPS = new Set(['id', 'className', 'type', 'name', 'value', 'checked', 'disabled', 'htmlFor', 'title',
  'placeholder', 'required', 'hidden', 'min', 'max', 'step', 'pattern', 'autocomplete', 'multiple', 'accept',
  'href', 'download', 'colSpan', 'scope', 'selected', 'tabIndex', 'spellcheck', 'inputMode', 'maxLength']);

/**
 * Text as it may be shown: bidirectional overrides and isolates, zero-width and other invisible
 * format characters (a refused attempt's transaction id is anyone's input) become U+FFFD, so
 * "1000\u202e0002" cannot display as another id.
 */
export function visible(value) {
  return String(value).replace(/[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/g, '\ufffd');
}

function apply(el, props) {
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false && !PROPS.has(key)) continue;
    if (key === 'style') throw new Error('style attributes are refused by the CSP: use a class');
    if (key === 'class') el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : value);
    else if (key === 'text') el.textContent = visible(value);
    else if (key === 'data') for (const [k, v] of Object.entries(value)) { if (v !== undefined && v !== null) el.dataset[k] = String(v); }
    else if (key === 'on') for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    else if (PROPS.has(key) && !(el instanceof SVGElement)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
}

/** `h('button', {type: 'button', data: {test: 'x'}, on: {click}}, 'Label')`. Strings become text nodes. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  apply(el, props);
  append(el, children);
  return el;
}

/** An SVG element, built the same way. */
export function s(tag, props, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, props);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

export function bytes(n) {
  if (!Number.isFinite(n)) return '—';
  let i = 0;
  let v = n;
  while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i += 1; }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${UNITS[i]}`;
}

/** A label and its input, in a `.field`. `input` is the element; its id must be set. */
export function field(labelText, input, hint) {
  const hintEl = hint ? h('small', {class: 'hint', id: `${input.id}-hint`, text: hint}) : null;
  if (hintEl) input.setAttribute('aria-describedby', hintEl.id);
  return h('div', {class: 'field'}, h('label', {htmlFor: input.id, text: labelText}), input, hintEl);
}

/**
 * A table in a horizontally scrolling container. `columns`: [{key, label, format?, className?}],
 * `rows`: objects. Every cell is text; long values keep their full text in `title`.
 */
export function table({caption, columns, rows, test, rowData, actions, empty = 'Nothing here yet.'}) {
  const head = h('thead', null, h('tr', null,
    columns.map((c) => h('th', {scope: 'col', text: c.label})),
    actions ? h('th', {scope: 'col', text: 'Actions'}) : null));
  const body = h('tbody');
  for (const row of rows) {
    const tr = h('tr', {data: {test: 'row', ...(rowData ? rowData(row) : {})}});
    for (const c of columns) {
      const raw = row[c.key];
      const text = c.format ? c.format(raw, row) : display(raw);
      const td = h('td', {class: c.className, data: {col: c.key}, text});
      if (text.length > 24) td.title = text;
      tr.append(td);
    }
    if (actions) tr.append(h('td', {class: 'row-actions'}, actions(row)));
    body.append(tr);
  }
  if (rows.length === 0) {
    body.append(h('tr', {class: 'empty'}, h('td', {colSpan: columns.length + (actions ? 1 : 0), text: empty})));
  }
  return h('div', {class: 'table-wrap', tabIndex: 0, role: 'region', 'aria-label': caption},
    h('table', {data: {test: test}}, h('caption', {text: caption}), head, body));
}

/** A value as table text: absent → "—", arrays joined, booleans as yes/no. */
export function display(value) {
  if (value === undefined || value === null || value === '') return '—';
  if (Array.isArray(value)) return value.length ? value.join(', ') : '—';
  if (typeof value === 'boolean') return value ? 'yes' : 'no';
  return String(value);
}

/** A status line: `kind` is one of info, ok, problem, busy. */
export function status(el, kind, text, state) {
  el.hidden = !text;
  el.className = `status ${kind}`;
  el.textContent = text ?? '';
  if (state) el.dataset.state = state;
  return el;
}
