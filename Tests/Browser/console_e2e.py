#!/usr/bin/env python3
"""Real-browser test of Coffer's web console (/console) in headless Chromium.

Needs a running server that has made a redemption (`.ci/console` starts one and runs the demo
walkthrough) and these environment variables:

    COFFER_URL    http://127.0.0.1:PORT
    ADMIN_KEY     an admin key            AUDITOR_KEY  an auditor key
    REDEEMED_TX   the transaction id of a redemption in the ledger

It checks the console's own headers, then as an admin uploads an asset (waiting for the
progress to reach done), puts a product with it, finds the redemption by transaction id,
exports CSV and NDJSON, pages the ledger, sees a verified checkpoint and the charts; as an
auditor it finds no admin action and no admin URL. At 1280 px and 375 px it keeps a
screenshot of every page (.build/console-screenshots/) and checks the page never scrolls
sideways. The browser log must hold no SEVERE entry (CSP violations land there) other than
the API answers the test provokes on purpose. Exit 0 when everything passed.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request

# selenium-manager must never download a driver or a browser.
os.environ["SE_OFFLINE"] = "true"

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
CONSOLE_DIR = REPO / "console"
SHOTS = REPO / ".build" / "console-screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
DESKTOP = (1280, 900)
PHONE = (375, 812)
WAIT = 30


class Failure(Exception):
    pass


def env(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise Failure(f"environment variable {name} is not set (see the docstring)")
    return value


URL = ""
ADMIN_KEY = ""
AUDITOR_KEY = ""
REDEEMED_TX = ""


def step(text: str) -> None:
    print(f"console_e2e: {text}", flush=True)


# ── HTTP checks without the browser ─────────────────────────────────────────────────────


def http(path: str, key: str | None = None, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(URL + path, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def check_served_files() -> None:
    step("the console's files and headers")
    status, headers, body = http("/console")
    if status != 200:
        raise Failure(f"GET /console answered {status}, not 200 (is the console route in this binary?)")
    expected = {
        "content-security-policy": CSP,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "cache-control": "no-cache",
    }
    for name, value in expected.items():
        if headers.get(name) != value:
            raise Failure(f"GET /console: {name} is {headers.get(name)!r}, expected {value!r}")
    if not headers.get("content-type", "").startswith("text/html"):
        raise Failure(f"GET /console: content type {headers.get('content-type')!r}")
    if body != (CONSOLE_DIR / "index.html").read_bytes():
        raise Failure(
            "GET /console is not console/index.html: the binary embeds an older console. Run scripts/embed-console "
            "and rebuild, or (debug builds) start the server with COFFER_CONSOLE_DIR=console"
        )
    types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    for file in sorted(CONSOLE_DIR.iterdir()):
        if file.name.startswith(".") or not file.is_file():
            continue
        status, headers, body = http(f"/console/{file.name}")
        if status != 200 or body != file.read_bytes():
            raise Failure(
                f"GET /console/{file.name} answered {status} with bytes that differ from console/{file.name}: "
                "run scripts/embed-console and rebuild (or set COFFER_CONSOLE_DIR=console in a debug build)"
            )
        if headers.get("content-security-policy") != CSP or headers.get("x-content-type-options") != "nosniff":
            raise Failure(f"GET /console/{file.name}: missing the console's security headers")
        want = types.get(file.suffix)
        if want and not headers.get("content-type", "").startswith(want):
            raise Failure(f"GET /console/{file.name}: content type {headers.get('content-type')!r}, expected {want}")
    status, _, _ = http("/console/")
    if status == 200:
        raise Failure("GET /console/ (trailing slash) answered 200: paths must be canonical")


def checkpoint_exists() -> bool:
    status, _, _ = http("/v1/audit/checkpoints/latest", AUDITOR_KEY)
    return status == 200


# ── The browser ─────────────────────────────────────────────────────────────────────────


class Browser:
    def __init__(self, downloads: pathlib.Path):
        options = Options()
        options.binary_location = CHROMIUM
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-features=Translate,MediaRouter,OptimizationHints",
            "--password-store=basic",
            "--lang=en-US",
            f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
        ):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        options.add_experimental_option(
            "prefs",
            {
                "download.default_directory": str(downloads),
                "download.prompt_for_download": False,
                "download.directory_upgrade": True,
                "safebrowsing.enabled": False,
            },
        )
        self.driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
        self.log: list[dict] = []
        self.allowed: list[tuple[str, str]] = []
        self.viewport(*DESKTOP)

    def quit(self) -> None:
        try:
            self.driver.quit()
        except Exception:  # noqa: BLE001 - best effort at teardown
            pass

    # Waiting ------------------------------------------------------------------------

    def until(self, what: str, condition, timeout: float = WAIT):
        try:
            return WebDriverWait(
                self.driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
            ).until(lambda d: condition())
        except TimeoutException:
            self.shot("FAILED-" + "".join(c if c.isalnum() else "-" for c in what)[:60])
            raise Failure(f"timed out after {timeout:g} s waiting for: {what}") from None

    def css(self, selector: str):
        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector: str, what: str | None = None, timeout: float = WAIT):
        def found():
            elements = [e for e in self.css(selector) if e.is_displayed()]
            return elements[0] if elements else None

        return self.until(what or f"{selector} to show", found, timeout)

    def test(self, name: str) -> str:
        return f'[data-test="{name}"]'

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    # Layout and evidence -------------------------------------------------------------

    def viewport(self, width: int, height: int) -> None:
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )
        self.width = width

    def shot(self, name: str, full: bool = False) -> None:
        """The viewport, or (full) the whole page as one tall image."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        if not full:
            self.driver.save_screenshot(str(SHOTS / f"{name}.png"))
            return
        size = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        image = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True,
             "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}},
        )
        (SHOTS / f"{name}.png").write_bytes(base64.b64decode(image["data"]))

    def no_sideways_scroll(self, page: str) -> None:
        widths = self.js(
            "return [document.documentElement.scrollWidth, window.innerWidth, document.body.scrollWidth];"
        )
        if widths[0] > widths[1] or widths[2] > widths[1]:
            offenders = self.js(
                """
                const w = window.innerWidth;
                return [...document.querySelectorAll('body *')]
                  .filter((e) => e.getBoundingClientRect().right > w + 0.5 && !e.closest('.table-wrap'))
                  .slice(0, 5).map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + '.' + e.className);
                """
            )
            raise Failure(f"{page} at {self.width} px scrolls sideways: scrollWidth {widths[0]} > innerWidth {widths[1]}; {offenders}")

    def drain_log(self) -> list[dict]:
        entries = self.driver.get_log("browser")
        self.log.extend(entries)
        return entries

    def expect_log(self, url_part: str, status: str) -> None:
        """A SEVERE network entry the test provokes on purpose (Chrome logs every 4xx fetch)."""
        self.allowed.append((url_part, status))

    def unseen_expected(self) -> list[str]:
        """Provoked entries that never reached the log: then the log is not being captured."""
        self.drain_log()
        severe = [e.get("message", "") for e in self.log if e.get("level") == "SEVERE"]
        return [f"{part} {status}" for part, status in self.allowed
                if not any(part in m and f"status of {status}" in m for m in severe)]

    def severe(self) -> list[str]:
        self.drain_log()
        bad = []
        for entry in self.log:
            if entry.get("level") != "SEVERE":
                continue
            message = entry.get("message", "")
            if any(part in message and f"status of {status}" in message for part, status in self.allowed):
                continue
            bad.append(message)
        return bad

    # Console actions ----------------------------------------------------------------

    def open(self, route: str = "") -> None:
        self.driver.get(f"{URL}/console{route}")

    def sign_in(self, key: str, role: str) -> None:
        self.one(self.test("signin-key"), "the sign-in form")
        field = self.one(self.test("signin-key"))
        field.clear()
        field.send_keys(key)
        self.one(self.test("signin-submit")).click()
        self.until(f"the role badge to say {role}", lambda: (self.css(self.test("role")) or [None])[0] is not None
                   and self.css(self.test("role"))[0].text.strip().lower() == role)
        if self.css(self.test("signin-key")) and self.css(self.test("signin-key"))[0].is_displayed():
            raise Failure("the sign-in form is still shown after signing in")

    def sign_out(self) -> None:
        self.one(self.test("signout")).click()
        self.one(self.test("signin-key"), "the sign-in form after signing out")

    def go(self, page: str) -> None:
        self.one(self.test(f"nav-{page}"), f"the {page} link").click()
        self.until(f"the {page} page", lambda: bool(self.css(f'section[data-page="{page}"]')))

    def wait_page_ready(self, page: str) -> None:
        if page == "catalogue":
            self.one(f'{self.test("products-table")} tbody tr[data-product-id]', "the products table")
            self.one(f'{self.test("assets-table")} tbody tr[data-asset-id]', "the assets table")
        elif page == "ledger":
            self.until("the ledger table", lambda: self.css(self.test("ledger-status"))
                       and self.css(self.test("ledger-status"))[0].get_attribute("data-state") in ("loaded", "error"))
            state = self.css(self.test("ledger-status"))[0]
            if state.get_attribute("data-state") == "error":
                raise Failure(f"the ledger shows a problem: {state.text}")
        elif page == "chain":
            self.until("a chain verdict", lambda: self.css(self.test("chain-status"))
                       and self.css(self.test("chain-status"))[0].get_attribute("data-state") not in ("loading", None))
        elif page == "charts":
            self.until("the two charts", lambda: len(self.css('svg[data-test^="chart-"] rect.bar')) == 48)


# ── The walkthrough ─────────────────────────────────────────────────────────────────────


TABLE_JS = """
const holder = document.querySelector(`[data-test="${arguments[0]}"]`);
if (!holder) return null;
if (arguments[1]) {
  const status = document.querySelector('[data-test="ledger-status"]');
  if (!status || status.dataset.state !== 'loaded') return null;
}
return [...holder.querySelectorAll('tbody tr[data-test="row"]')].map((tr) => {
  const row = {_data: {...tr.dataset}};
  for (const td of tr.querySelectorAll('td[data-col]')) row[td.dataset.col] = td.textContent.trim();
  return row;
});
"""


def table(browser: Browser, test: str) -> list[dict]:
    """A table's rows as {column: text}, read in one script (never half re-rendered)."""
    return browser.js(TABLE_JS, test, False) or []


def ledger(browser: Browser) -> list[dict] | None:
    """The ledger table's rows once the page has loaded (None while loading)."""
    return browser.js(TABLE_JS, "ledger-table", True)


def one_ledger_row(browser: Browser, **expected: str):
    """A wait condition: exactly one ledger row, with these column values."""
    def condition():
        found = ledger(browser)
        return found is not None and len(found) == 1 and all(found[0].get(k) == v for k, v in expected.items()) and found[0]
    return condition


def wait_download(browser: Browser, folder: pathlib.Path, suffix: str, before: set[str]) -> pathlib.Path:
    def done():
        names = {p.name for p in folder.iterdir()}
        fresh = [n for n in names - before if n.endswith(suffix)]
        partial = [n for n in names if n.endswith(".crdownload") or n.endswith(".tmp")]
        return folder / fresh[0] if fresh and not partial else None

    return browser.until(f"a downloaded {suffix} file in {folder}", done)


def admin_walkthrough(b: Browser, downloads: pathlib.Path, stamp: str) -> None:
    b.open()
    b.one(b.test("signin-form"), "the sign-in page")
    b.shot("signin-desktop")

    step("a wrong key is refused with its problem code")
    b.expect_log("/v1/whoami", "401")
    b.one(b.test("signin-key")).send_keys("not-a-key")
    b.one(b.test("signin-submit")).click()
    error = b.one(b.test("signin-error"), "the sign-in error")
    b.until("the sign-in error to name 401 unauthenticated", lambda: "401 unauthenticated" in error.text)
    b.one(b.test("signin-key")).clear()

    step("sign in as admin (kept in this tab: opt in)")
    remember = b.one(b.test("signin-remember"))
    if remember.is_selected():
        raise Failure("keeping the key in session storage must be opt-in")
    remember.click()
    b.sign_in(ADMIN_KEY, "admin")
    if "#/catalogue" not in b.driver.current_url:
        raise Failure(f"an admin lands on the catalogue, not {b.driver.current_url}")
    if ADMIN_KEY in b.driver.current_url:
        raise Failure("the key appears in the URL")
    b.wait_page_ready("catalogue")

    step("the key: session storage of this tab only, never a cookie, localStorage or the URL")
    b.driver.refresh()
    b.until("still signed in as admin after a reload", lambda: b.css(b.test("role")) and b.css(b.test("role"))[0].text.strip().lower() == "admin")
    b.wait_page_ready("catalogue")
    kept = b.js("return {cookie: document.cookie, local: localStorage.length, url: location.href, "
                "session: Object.keys(sessionStorage)};")
    if kept["cookie"] or kept["local"] or ADMIN_KEY in kept["url"] or kept["session"] != ["coffer.console.key"]:
        raise Failure(f"the key is kept somewhere else: {kept}")

    step("upload an asset and watch the progress reach done")
    payload = os.urandom(6 * 1024 * 1024 + 123)
    digest = hashlib.sha256(payload).hexdigest()
    asset_id = f"e2e-asset-{stamp}"
    upload_dir = pathlib.Path(tempfile.mkdtemp(prefix="coffer-e2e-upload-"))
    try:
        path = upload_dir / f"e2e level {stamp}.pak"
        path.write_bytes(payload)
        b.one(b.test("upload-asset-id")).send_keys(asset_id)
        b.one(b.test("upload-file")).send_keys(str(path))
        b.one(b.test("upload-submit")).click()
        status = b.one(b.test("upload-status"), "the upload status")
        b.until("the upload to finish", lambda: status.get_attribute("data-state") in ("done", "error"), timeout=120)
        if status.get_attribute("data-state") != "done":
            raise Failure(f"the upload failed: {status.text}")
    finally:
        shutil.rmtree(upload_dir, ignore_errors=True)
    progress = b.one(b.test("upload-progress"))
    if progress.get_attribute("value") != "100":
        raise Failure(f"the progress bar ends at {progress.get_attribute('value')}, not 100")
    progress_text = b.one(b.test("upload-progress-text")).text
    if "100%" not in progress_text or "/s" not in progress_text:
        raise Failure(f"the progress line does not show bytes, percent and rate: {progress_text!r}")
    if digest not in status.text or "digest checked" not in status.text:
        raise Failure(f"the upload status does not show the server-checked SHA-256 {digest}: {status.text!r}")
    b.one(f'{b.test("assets-table")} tr[data-asset-id="{asset_id}"]', "the new asset in the assets table")
    shown = next(r for r in table(b, "assets-table") if r["_data"].get("assetId") == asset_id)
    if shown["name"] != f"e2e level {stamp}.pak" or shown["version"] != "1":
        raise Failure(f"the asset row shows name {shown['name']!r} version {shown['version']!r}")
    row = b.css(f'{b.test("assets-table")} tr[data-asset-id="{asset_id}"]')[0]

    step("the asset's versions")
    row.find_element(By.CSS_SELECTOR, b.test("asset-versions-button")).click()
    b.one(f'{b.test("asset-versions-table")} tbody tr[data-test="row"]', "the asset's upload in the versions panel")
    version = table(b, "asset-versions-table")[0]
    if version["version"] != "1" or version["sha256"] != digest:
        raise Failure(f"the versions panel shows {version!r}")

    step("put a product with that asset")
    product_id = f"com.coffer.demo.e2e{stamp}"
    title = f"E2E level pack {stamp}"
    bundle = b.one(b.test("product-bundle"))
    if bundle.get_attribute("value") != "com.coffer.demo":
        raise Failure(f"the bundle id is not prefilled from the catalogue: {bundle.get_attribute('value')!r}")
    b.one(b.test("product-id")).send_keys(product_id)
    b.one(b.test("product-title")).send_keys(title)
    b.one(f'{b.test("product-type")} option[value="nonConsumable"]').click()
    b.one(f'{b.test("product-asset")}[data-asset-id="{asset_id}"]', "the asset's checkbox").click()
    b.one(b.test("product-submit")).click()
    b.one(f'{b.test("products-table")} tr[data-product-id="{product_id}"]', "the new product in the products table")
    saved = next(r for r in table(b, "products-table") if r["_data"].get("productId") == product_id)
    if saved["title"] != title:
        raise Failure(f"the product title is shown as {saved['title']!r}, not the literal text {title!r}")
    if saved["assetIds"] != asset_id or saved["type"] != "nonConsumable":
        raise Failure(f"the product row shows assets {saved['assetIds']!r}, type {saved['type']!r}")
    status, _, body = http("/v1/admin/products", ADMIN_KEY)
    stored = [p for p in json.loads(body) if p["productId"] == product_id]
    if status != 200 or not stored or stored[0]["assetIds"] != [asset_id] or stored[0]["title"] != title:
        raise Failure(f"the server does not hold the product as put: {stored}")
    b.js("window.scrollTo(0, 0)")
    b.shot("catalogue-desktop")

    step("a product title that looks like markup is shown as text; then delete it (two clicks)")
    doomed = f"com.coffer.demo.e2edel{stamp}"
    markup = f'<img src=x data-e2e="{stamp}"> & "co" <b>bold</b>'
    request = urllib.request.Request(
        f"{URL}/v1/admin/products/{doomed}", method="PUT",
        data=json.dumps({"bundleId": "com.coffer.demo", "type": "consumable", "assetIds": [asset_id], "title": markup}).encode(),
        headers={"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()
    b.one(b.test("catalogue-refresh")).click()
    row = b.one(f'{b.test("products-table")} tr[data-product-id="{doomed}"]', "the product to delete")
    shown = next(r for r in table(b, "products-table") if r["_data"].get("productId") == doomed)
    if shown["title"] != markup or b.css(f'img[data-e2e="{stamp}"]') or b.css(f'{b.test("products-table")} b'):
        raise Failure(f"a product title was rendered as markup: {shown['title']!r}")
    row.find_element(By.CSS_SELECTOR, b.test("product-delete")).click()
    b.until("the delete button to ask for confirmation",
            lambda: row.find_element(By.CSS_SELECTOR, b.test("product-delete")).get_attribute("data-state") == "confirm")
    row.find_element(By.CSS_SELECTOR, b.test("product-delete")).click()
    b.until("the deleted product to leave the table",
            lambda: not b.css(f'{b.test("products-table")} tr[data-product-id="{doomed}"]'))
    if http("/v1/admin/products", ADMIN_KEY)[2].find(doomed.encode()) >= 0:
        raise Failure("the server still holds the deleted product")

    step("find the walkthrough's redemption by transaction id")
    b.go("ledger")
    b.wait_page_ready("ledger")
    b.one(b.test("filter-transactionId")).send_keys(REDEEMED_TX)
    b.one(b.test("ledger-apply")).click()
    b.until(f"exactly the redemption of transaction {REDEEMED_TX}", one_ledger_row(b, transactionId=REDEEMED_TX))
    b.shot("ledger-desktop")

    step("export the filtered redemptions as CSV and NDJSON")
    before = {p.name for p in downloads.iterdir()}
    b.one(b.test("export-csv")).click()
    exported = wait_download(b, downloads, ".csv", before)
    records = list(csv.DictReader(io.StringIO(exported.read_text(encoding="utf-8"))))
    if len(records) != 1 or records[0].get("transactionId") != REDEEMED_TX or not records[0].get("redemptionId"):
        raise Failure(f"the CSV export {exported.name} holds {records}, not the one redemption of {REDEEMED_TX}")
    b.until("the export status", lambda: b.css(b.test("export-status"))[0].get_attribute("data-state") == "done")
    before = {p.name for p in downloads.iterdir()}
    b.one(b.test("export-ndjson")).click()
    exported = wait_download(b, downloads, ".ndjson", before)
    lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(lines) != 1 or lines[0].get("transactionId") != REDEEMED_TX:
        raise Failure(f"the NDJSON export holds {lines}")

    step("page through the redemptions one row at a time (nextCursor)")
    b.one(b.test("ledger-reset")).click()
    size = b.one(b.test("ledger-page-size"))
    size.clear()
    size.send_keys("1\n")
    def first_page():
        row = one_ledger_row(b)()
        return row if row and b.one(b.test("ledger-next")).is_enabled() else None

    first = b.until("page 1 with one row and a next page", first_page)["sequence"]
    b.one(b.test("ledger-next")).click()
    b.until("page 2", lambda: "Page 2" in b.one(b.test("ledger-page")).text
            and (row := one_ledger_row(b)()) and row["sequence"] != first)
    b.one(b.test("ledger-prev")).click()
    b.until("back on page 1", one_ledger_row(b, sequence=first))
    size = b.one(b.test("ledger-page-size"))
    size.clear()
    size.send_keys("100\n")

    step("refused attempts, filtered by code")
    b.one(b.test("ledger-tab-attempts")).click()
    b.one(b.test("filter-code")).send_keys("alreadyRedeemed")
    b.one(b.test("ledger-apply")).click()
    b.until("the walkthrough's refused replay", lambda: any(
        r.get("code") == "alreadyRedeemed" and r.get("transactionId") == REDEEMED_TX for r in ledger(b) or []))
    for tab in ("revocations", "events", "deliveries"):
        b.one(b.test(f"ledger-tab-{tab}")).click()
        b.until(f"the {tab} table", lambda t=tab: b.css(f'{b.test("ledger-table")}[data-kind="{t}"]'))
    b.until("the walkthrough's download in the deliveries", lambda: len(ledger(b) or []) >= 1)
    b.one(b.test("ledger-tab-redemptions")).click()
    b.until("the redemptions table again", lambda: b.css(f'{b.test("ledger-table")}[data-kind="redemptions"]'))

    step("chain status: a verified checkpoint")
    b.until("the server to sign a checkpoint", checkpoint_exists)
    b.go("chain")
    b.wait_page_ready("chain")
    verdict = b.one(b.test("chain-status"))
    if verdict.get_attribute("data-state") != "valid" or "Signature valid" not in verdict.text:
        raise Failure(f"the chain status is {verdict.get_attribute('data-state')}: {verdict.text}")
    _, _, body = http("/v1/audit/public-key", AUDITOR_KEY)
    key_id = json.loads(body)["keyId"]
    if b.one(b.test("chain-keyid")).text != key_id or not b.one(b.test("chain-sequence")).text.isdigit():
        raise Failure("the chain status does not show the sequence and the server's key id")
    if "coffer audit verify" not in b.one(b.test("chain-note")).text or "--public-key" not in b.one(b.test("chain-note")).text:
        raise Failure("the chain page does not say how to verify with a pinned key")
    step("the same verifier says INVALID for a tampered checkpoint")
    verdicts = b.driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        (async () => {
          const {verifyCheckpoint} = await import('/console/chain.js');
          const h = {Authorization: 'Bearer ' + arguments[0]};
          const cp = await (await fetch('/v1/audit/checkpoints/latest', {headers: h})).json();
          const key = await (await fetch('/v1/audit/public-key', {headers: h})).json();
          const flip = (c) => (c === '0' ? '1' : '0');
          const out = [];
          out.push((await verifyCheckpoint(cp, key.publicKey)).state);
          out.push((await verifyCheckpoint({...cp, entryHash: flip(cp.entryHash[0]) + cp.entryHash.slice(1)}, key.publicKey)).state);
          out.push((await verifyCheckpoint({...cp, sequence: cp.sequence + 1}, key.publicKey)).state);
          out.push((await verifyCheckpoint({...cp, time: cp.time + 1}, key.publicKey)).state);
          return out;
        })().then(done, (e) => done(['error ' + e]));
        """,
        AUDITOR_KEY,
    )
    if verdicts != ["valid", "invalid", "invalid", "invalid"]:
        raise Failure(f"the in-browser verifier answered {verdicts} for (intact, hash, sequence, time)")
    b.shot("chain-desktop")

    step("charts: redemptions and refused attempts per hour")
    b.go("charts")
    b.wait_page_ready("charts")
    total = b.js("""return [...document.querySelectorAll('svg[data-test="chart-redemptions"] rect.bar')]
                      .reduce((n, r) => n + Number(r.dataset.count), 0);""")
    refused = b.js("""return [...document.querySelectorAll('svg[data-test="chart-attempts"] rect.bar')]
                        .reduce((n, r) => n + Number(r.dataset.count), 0);""")
    tall = b.js("""return [...document.querySelectorAll('svg[data-test="chart-redemptions"] rect.bar')]
                     .filter((r) => r.getBBox().height > 0).length;""")
    if total < 1 or refused < 1 or tall < 1:
        raise Failure(f"the charts show {total} redemptions ({tall} visible bars) and {refused} refused attempts")
    b.shot("charts-desktop")

    step("every page at 375 px: no sideways scroll")
    b.viewport(*PHONE)
    for page in ("catalogue", "ledger", "chain", "charts"):
        b.go(page)
        b.wait_page_ready(page)
        b.js("window.scrollTo(0, 0)")
        b.no_sideways_scroll(page)
        if page == "ledger":
            inside = b.js("""const w = document.querySelector('.table-wrap');
                             return [w.scrollWidth, w.clientWidth, getComputedStyle(w).overflowX];""")
            if not (inside[0] > inside[1] and inside[2] == "auto"):
                raise Failure(f"the ledger table does not scroll inside its container at 375 px: {inside}")
        b.shot(f"{page}-375", full=True)
    b.sign_out()
    b.no_sideways_scroll("sign-in")
    b.shot("signin-375", full=True)
    b.viewport(*DESKTOP)


def auditor_walkthrough(b: Browser) -> None:
    step("sign in as auditor: no admin actions, no admin URLs")
    # Role detection asks GET /v1/whoami: an auditor's key is answered 200, nothing is logged.
    b.sign_in(AUDITOR_KEY, "auditor")
    b.until("the auditor's first page, the ledger", lambda: "#/ledger" in b.driver.current_url)
    b.wait_page_ready("ledger")

    def assert_no_admin(where: str) -> None:
        found = b.js(
            """
            const links = [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'));
            return {
              admin: document.querySelectorAll('[data-admin]').length,
              catalogueLinks: links.filter((h) => h.includes('catalogue') || h.includes('/v1/admin')),
              forms: document.querySelectorAll('input[type=file], #upload-form, #product-form, [data-test=product-delete]').length,
              adminText: /\\/v1\\/admin/.test(document.body.innerHTML),
              nav: [...document.querySelectorAll('#nav a')].map((a) => a.textContent),
            };
            """
        )
        if found["admin"] or found["catalogueLinks"] or found["forms"] or found["adminText"] or "Catalogue" in found["nav"]:
            raise Failure(f"{where}: an auditor is offered admin actions: {found}")

    assert_no_admin("the ledger")
    b.one(b.test("filter-transactionId")).send_keys(REDEEMED_TX)
    b.one(b.test("ledger-apply")).click()
    b.until("the auditor finding the redemption", one_ledger_row(b, transactionId=REDEEMED_TX))
    b.shot("auditor-ledger-desktop")
    for page in ("chain", "charts"):
        b.go(page)
        b.wait_page_ready(page)
        assert_no_admin(page)
        b.shot(f"auditor-{page}-desktop")

    step("an auditor asking for the catalogue URL gets the ledger")
    b.open("#/catalogue")
    b.until("the ledger instead of the catalogue", lambda: "#/ledger" in b.driver.current_url and b.css('section[data-page="ledger"]'))
    b.wait_page_ready("ledger")
    assert_no_admin("#/catalogue")

    b.viewport(*PHONE)
    for page in ("ledger", "chain", "charts"):
        b.go(page)
        b.wait_page_ready(page)
        b.no_sideways_scroll(f"auditor {page}")
        b.shot(f"auditor-{page}-375", full=True)
    b.viewport(*DESKTOP)
    b.sign_out()


def main() -> int:
    global URL, ADMIN_KEY, AUDITOR_KEY, REDEEMED_TX
    started = time.monotonic()
    browser = None
    downloads = pathlib.Path(tempfile.mkdtemp(prefix="coffer-e2e-downloads-"))
    try:
        URL = env("COFFER_URL").rstrip("/")
        ADMIN_KEY = env("ADMIN_KEY")
        AUDITOR_KEY = env("AUDITOR_KEY")
        REDEEMED_TX = env("REDEEMED_TX")
        for tool in (CHROMIUM, CHROMEDRIVER):
            if not os.access(tool, os.X_OK):
                raise Failure(f"{tool} is missing: apt-get install -y chromium chromium-driver")
        if SHOTS.exists():
            for old in SHOTS.glob("*.png"):
                old.unlink()
        check_served_files()
        stamp = time.strftime("%H%M%S") + f"{os.getpid() % 1000:03d}"
        browser = Browser(downloads)
        admin_walkthrough(browser, downloads, stamp)
        auditor_walkthrough(browser)
        severe = browser.severe()
        if severe:
            raise Failure("the browser log has SEVERE entries:\n  " + "\n  ".join(severe))
        unseen = browser.unseen_expected()
        if unseen:
            raise Failure(f"the browser log is not captured: the provoked entries {unseen} are missing from it")
        step(f"OK in {time.monotonic() - started:.1f} s; screenshots in {SHOTS.relative_to(REPO)}/")
        return 0
    except Failure as failure:
        if browser:
            extra = browser.severe()
            if extra:
                print("console_e2e: browser log SEVERE entries:\n  " + "\n  ".join(extra), file=sys.stderr)
        print(f"console_e2e: FAILED: {failure}", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - any other error is a failure with its trace
        traceback.print_exc()
        print("console_e2e: FAILED with an unexpected error (trace above)", file=sys.stderr)
        return 1
    finally:
        if browser:
            browser.quit()
        shutil.rmtree(downloads, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
