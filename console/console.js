// Coffer console: sign-in, role detection, navigation. Pages live in their own modules.
import {Api, ApiError, problemLine} from './api.js';
import {h, replace} from './dom.js';
import {mountCatalogue} from './catalogue.js';
import {mountLedger, resetLedgerMemory} from './ledger.js';
import {mountChain} from './chain.js';
import {mountCharts} from './charts.js';

const STORAGE_KEY = 'coffer.console.key';

const PAGES = [
  {id: 'catalogue', label: 'Catalogue', admin: true, mount: mountCatalogue},
  {id: 'ledger', label: 'Ledger', mount: mountLedger},
  {id: 'chain', label: 'Chain status', mount: mountChain},
  {id: 'charts', label: 'Charts', mount: mountCharts},
];

const $ = (id) => document.getElementById(id);

/** The signed-in session: the key lives here (and, if asked, in this tab's session storage). */
let session = null;
let unmount = null;

/** GET /v1/whoami: the key's role (admin or auditor); a problem (401 for a wrong key) is shown. */
async function detectRole(key) {
  const me = await new Api(key).get('/v1/whoami');
  if (me?.role !== 'admin' && me?.role !== 'auditor') throw new Error('the server did not say which key this is');
  return me.role;
}

function showBanner(text) {
  const banner = $('banner');
  banner.hidden = !text;
  banner.textContent = text ?? '';
}

function pagesFor(role) {
  return PAGES.filter((page) => !page.admin || role === 'admin');
}

function routeId() {
  const match = /^#\/([a-z]+)$/.exec(location.hash);
  return match ? match[1] : null;
}

function renderNav() {
  const nav = $('nav');
  replace(nav, h('ul', null, pagesFor(session.role).map((page) => h('li', null,
    h('a', {
      href: `#/${page.id}`,
      id: `nav-${page.id}`,
      data: {test: `nav-${page.id}`, admin: page.admin ? '' : undefined},
    }, page.label)))));
  nav.hidden = false;
}

function route() {
  if (!session) return;
  const pages = pagesFor(session.role);
  const wanted = routeId();
  let page = pages.find((p) => p.id === wanted);
  if (!page) {
    // Unknown, or an admin page asked for by an auditor: the first page this role has.
    page = pages[0];
    if (wanted && PAGES.some((p) => p.id === wanted)) showBanner(`The ${wanted} page needs an admin key.`);
    history.replaceState(null, '', `#/${page.id}`);
  }
  for (const link of $('nav').querySelectorAll('a')) {
    if (link.id === `nav-${page.id}`) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  unmount?.();
  unmount = null;
  const app = $('app');
  const container = h('section', {class: 'page', id: `page-${page.id}`, data: {page: page.id}, 'aria-label': page.label});
  replace(app, container);
  document.title = `${page.label} · Coffer console`;
  unmount = page.mount(container, {api: session.api, role: session.role}) ?? null;
}

function signedIn(key, role, remember) {
  const api = new Api(key, {
    onUnauthenticated: (problem) => showBanner(`The key is no longer accepted (${problem.line}). Sign out and sign in again.`),
  });
  session = {api, role};
  if (remember) sessionStorage.setItem(STORAGE_KEY, key);
  else sessionStorage.removeItem(STORAGE_KEY);
  $('role').textContent = role;
  $('role').dataset.role = role;
  $('session').hidden = false;
  $('signin-page').hidden = true;
  $('app').hidden = false;
  document.body.dataset.role = role;
  renderNav();
  route();
}

function signOut() {
  unmount?.();
  unmount = null;
  session = null;
  sessionStorage.removeItem(STORAGE_KEY);
  resetLedgerMemory();
  delete document.body.dataset.role;
  replace($('app'));
  $('app').hidden = true;
  replace($('nav'));
  $('nav').hidden = true;
  $('session').hidden = true;
  $('role').textContent = '';
  showBanner(null);
  $('signin-error').hidden = true;
  $('signin-key').value = '';
  $('signin-page').hidden = false;
  document.title = 'Coffer console';
  if (location.hash) history.replaceState(null, '', location.pathname);
  $('signin-key').focus();
}

async function onSignIn(event) {
  event.preventDefault();
  const key = $('signin-key').value.trim();
  const error = $('signin-error');
  const button = $('signin-submit');
  if (!key) {
    error.textContent = 'Paste a key first.';
    error.hidden = false;
    return;
  }
  button.disabled = true;
  error.hidden = true;
  try {
    const role = await detectRole(key);
    $('signin-key').value = '';
    signedIn(key, role, $('signin-remember').checked);
  } catch (problem) {
    const hint = problem instanceof ApiError && problem.status === 401 ? ' (wrong or revoked key)' : '';
    error.textContent = `Sign-in failed: ${problemLine(problem)}${hint}`;
    error.hidden = false;
  } finally {
    button.disabled = false;
  }
}

async function start() {
  $('signin-form').addEventListener('submit', onSignIn);
  $('signout').addEventListener('click', signOut);
  window.addEventListener('hashchange', () => {
    if (routeId()) { showBanner(null); route(); }
  });
  const saved = sessionStorage.getItem(STORAGE_KEY);
  if (saved) {
    try {
      signedIn(saved, await detectRole(saved), true);
      return;
    } catch (problem) {
      sessionStorage.removeItem(STORAGE_KEY);
      $('signin-error').textContent = `The saved key was not accepted: ${problemLine(problem)}`;
      $('signin-error').hidden = false;
    }
  }
  $('signin-key').focus();
}

start();
