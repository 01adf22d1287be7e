"""The web portal as a user meets it, for the portal's tests on both targets and its benchmark:
Debian's Chromium through its WebDriver (Selenium), a hub's login form, its start form and
JupyterLab's launcher. A test that fails leaves each browser's screenshot and page under
.cache/portal/ (the ``browsers`` fixture)."""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import (
    StaleElementReferenceException,
    TimeoutException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from tests.common import ROOT

ARTIFACTS = ROOT / ".cache" / "portal"
# where the docs' pictures are taken to, when a run is asked for them (tests/pictures.py)
PICTURES = os.environ.get("SLURMFORGE_PICTURES")
# a notebook cell that prints the Python its kernel runs
PYTHON_VERSION = "import sys; print('python', sys.version.split()[0])"


def ssha(password: str) -> str:
    """A directory password as slapd stores one ({SSHA}: salted SHA-1, RFC 2307's scheme)."""
    salt = os.urandom(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


class Chromium(webdriver.Chrome):
    """Chromium abandons a page load when its network changes under it (ERR_NETWORK_CHANGED).
    It runs in a namespace of its own, which no container changes (own_network.py); should a
    load still be abandoned, it is made again, as a user reloads."""

    def get(self, url: str) -> None:
        for _ in range(3):
            super().get(url)
            if not network_changed(self):
                return
            time.sleep(2)


def network_changed(driver: WebDriver) -> bool:
    """Whether Chromium abandoned the page (a load or a form's submission) for a change of the
    host's network: the error page it shows instead."""
    return bool(driver.find_elements(By.CSS_SELECTOR, "body.neterror")) and (
        "ERR_NETWORK_CHANGED" in driver.page_source
    )


@cache
def _chromium_in_its_own_network() -> str:
    """An executable ChromeDriver starts as its browser: Debian's Chromium, in a network
    namespace of its own (tests/own_network.py)."""
    binary = shutil.which("chromium") or "/usr/bin/chromium"
    mover = Path(__file__).with_name("own_network.py")
    home = tempfile.mkdtemp(prefix="slurmforge-chromium-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    script = Path(home) / "chromium"
    words = " ".join(shlex.quote(w) for w in (sys.executable, str(mover), binary))
    # its temporary files under that directory too: the singleton directories Chromium makes
    # in $TMPDIR outlived every browser test, 44 of them in a machine's /tmp
    tmp = Path(home) / "tmp"
    tmp.mkdir()
    script.write_text(f'#!/bin/sh\nTMPDIR={shlex.quote(str(tmp))} exec {words} "$@"\n')
    script.chmod(0o755)
    return str(script)


def chromium() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = _chromium_in_its_own_network()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    # ChromeDriver's way in when Chromium's debugging port is in another namespace
    options.add_argument("--remote-debugging-pipe")
    options.add_argument("--window-size=1400,1000")
    # the portal's certificate is self-signed unless a site gives its own: a user accepts it
    # once, having checked the fingerprint the deploy printed (the portal tests compare it)
    options.accept_insecure_certs = True
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = Chromium(options=options, service=service)
    driver.set_page_load_timeout(60)
    return driver


@pytest.fixture
def browsers(request: pytest.FixtureRequest) -> Iterator[Callable[[], WebDriver]]:
    """New browsers, each with no cookie of another (a second person at another machine); a
    failed test leaves each one's screenshot and page under .cache/portal/."""
    opened: list[WebDriver] = []

    def new() -> WebDriver:
        opened.append(chromium())
        return opened[-1]

    yield new
    report = getattr(request.node, "rep_call", None)
    for i, driver in enumerate(opened):
        if report is not None and report.failed:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', request.node.name)}-{i}"
            driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
            (ARTIFACTS / f"{name}.html").write_text(driver.page_source)
        driver.quit()


@pytest.fixture
def browser(browsers: Callable[[], WebDriver]) -> WebDriver:
    return browsers()


def picture(driver: WebDriver, name: str) -> None:
    """The page as the user sees it now, for the docs (only in a run asked for pictures): a
    window of 1100 by 720, the size a reader's screen shows without scaling."""
    if not PICTURES:
        return
    size = driver.get_window_size()
    driver.set_window_size(1100, 720)
    time.sleep(1)  # the page lays itself out again
    driver.save_screenshot(os.path.join(PICTURES, f"{name}.png"))
    driver.set_window_size(size["width"], size["height"])


def wait_for(driver: WebDriver, timeout: float = 30) -> WebDriverWait:
    """A wait that takes an element the page re-rendered between finding it and checking it
    (JupyterLab redraws a new notebook's cell as its kernel connects) for not ready yet."""
    return WebDriverWait(
        driver, timeout, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,)
    )


def hub_home(driver: WebDriver, url: str) -> None:
    """The hub's home page, as far as its Start button; else what the page showed instead (the
    login page for a session the hub does not know, a proxy's error for a hub not up)."""
    driver.get(f"{url}/hub/home")
    try:
        wait_for(driver).until(ready.presence_of_element_located((By.ID, "start")))
    except TimeoutException:
        raise AssertionError(f"no home page: {driver.current_url} {said(driver)}") from None


def _submit_login(driver: WebDriver, url: str, user: str, password: str) -> bool:
    """The login form, filled and sent (again, as a user would, when Chromium abandoned the
    submission for a network change); whether the hub let the user in."""
    for _ in range(3):
        driver.get(f"{url}/hub/login")
        wait_for(driver).until(ready.presence_of_element_located((By.ID, "username_input")))
        driver.find_element(By.ID, "username_input").send_keys(user)
        driver.find_element(By.ID, "password_input").send_keys(password)
        driver.find_element(By.ID, "login_submit").click()
        # the hub's answer: on to the user's page, or the login form again with its refusal
        wait_for(driver).until(
            lambda d: (
                "/hub/login" not in d.current_url
                or "Invalid username" in d.page_source
                or network_changed(d)
            )
        )
        if not network_changed(driver):
            break
        time.sleep(2)
    return "/hub/login" not in driver.current_url


def log_in(driver: WebDriver, url: str, user: str, password: str) -> None:
    """A login with the right password, as a user tries again after a moment when the directory
    was slow to answer (SSSD counts a bind that takes over ldap_opt_timeout as a refusal: a
    loaded CI machine showed it once)."""
    deadline = time.monotonic() + 30
    while not _submit_login(driver, url, user, password):
        assert time.monotonic() < deadline, f"{user} was refused for 30 s with the right password"
        time.sleep(5)


def refused(driver: WebDriver, url: str, user: str, password: str) -> bool:
    """Whether a login is refused, with the hub's own message."""
    return not _submit_login(driver, url, user, password) and (
        "Invalid username or password" in driver.page_source
    )


def start_server(driver: WebDriver, url: str, cpus: int = 1, timeout: float = 180) -> None:
    """The start form, filled as a user would, then JupyterLab's shell once it is up. When
    Chromium abandoned the page for a network change, the user opens the start page again: the
    hub sends her on to her server, starting or up, or shows the form if it never got it."""
    lab = (By.ID, "jp-main-dock-panel")
    for _ in range(3):
        driver.get(f"{url}/hub/spawn")
        wait_for(driver).until(
            lambda d: (
                d.find_elements(By.ID, "cpus")
                or d.find_elements(*lab)
                or "spawn-pending" in d.current_url
            )
        )
        if field := driver.find_elements(By.ID, "cpus"):
            field[0].clear()
            field[0].send_keys(str(cpus))
            picture(driver, "portal-form")
            driver.find_element(
                By.CSS_SELECTOR, "form input[type=submit], form button[type=submit]"
            ).click()
        _until_lab(driver, lab, time.monotonic() + timeout)
        if not network_changed(driver):
            if PICTURES:  # the launcher's cards drawn
                wait_for(driver, 60).until(
                    lambda d: d.find_elements(By.CLASS_NAME, "jp-LauncherCard")
                )
                picture(driver, "portal-jupyterlab")
            return
        time.sleep(2)
    raise AssertionError(f"Chromium lost the portal to network changes: {driver.current_url}")


def said(driver: WebDriver) -> str:
    """The page's title and the start of its text: what the hub told the user, for a failure's
    message (CI keeps no screenshot)."""
    try:
        text = " ".join(driver.find_element(By.TAG_NAME, "body").text.split())
    except WebDriverException:
        text = ""
    return f"{driver.title!r}: {text[:300]!r}"


def _until_lab(driver: WebDriver, lab: tuple[str, str], deadline: float) -> None:
    """JupyterLab's shell (or Chromium's page for a network change) by ``deadline``. A JupyterLab
    page that stays blank for a minute lost one of its scripts (CI saw one: the page's styles
    and no shell, for three minutes): it is reloaded, as a user would."""
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no JupyterLab in time: {driver.current_url} {said(driver)}"
        try:
            wait_for(driver, min(60, left)).until(
                lambda d: d.find_elements(*lab) or network_changed(d)
            )
            return
        except TimeoutException:
            if "/lab" in driver.current_url:
                driver.refresh()


def _launcher_cards(driver: WebDriver) -> list:
    return [c for c in driver.find_elements(By.CSS_SELECTOR, ".jp-LauncherCard") if c.text]


def launcher_card(driver: WebDriver, url: str, user: str, title: str):
    """A card of JupyterLab's launcher, in a layout reset to the launcher alone. A page that
    stays blank for a minute lost one of its scripts (Chromium abandons a request on a host
    network change, as the k8s lane makes pods beside this lane; CI saw it): it is loaded again,
    up to 3 times, as a user would."""
    for _ in range(3):
        driver.get(f"{url}/user/{user}/lab?reset")
        try:
            cards = wait_for(driver, 60).until(_launcher_cards)
            break
        except TimeoutException:
            continue
    else:
        raise AssertionError(f"no JupyterLab launcher in 3 loads: {said(driver)}")
    found = [c for c in cards if title.lower() in c.text.lower()]
    assert found, f"no launcher card {title!r} in {[c.text for c in cards]}"
    return found[0]


def stop_server(driver: WebDriver, url: str, timeout: float = 90) -> None:
    """*Stop My Server* on the hub's home page, pressed until the hub has taken it (the button
    hides once the hub answers). On a loaded machine the button can be shown before the page's
    script has bound it (CI saw a press do nothing once), so a press that changed nothing in
    20 s is made again, as a user would."""
    driver.get(f"{url}/hub/home")
    deadline = time.monotonic() + timeout
    while True:
        wait_for(driver).until(lambda d: d.find_elements(By.ID, "stop") or network_changed(d))
        if network_changed(driver):  # the page abandoned: opened again, as a user would
            assert time.monotonic() < deadline, f"the hub did not stop the server: {said(driver)}"
            driver.get(f"{url}/hub/home")
            continue
        button = wait_for(driver).until(ready.element_to_be_clickable((By.ID, "stop")))
        button.click()
        try:
            wait_for(driver, 20).until(ready.invisibility_of_element_located((By.ID, "stop")))
            return
        except TimeoutException:
            assert time.monotonic() < deadline, f"the hub did not stop the server: {said(driver)}"


def _fetch_failed(driver: WebDriver) -> bool:
    """JupyterLab's dialog for a request Chromium abandoned (a host network change, as the k8s
    lane makes beside the portal's tests): "File Load Error ... Failed to fetch"."""
    dialogs = driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog")
    return any("Failed to fetch" in d.text for d in dialogs)


def run_python(driver: WebDriver, url: str, user: str, code: str) -> str:
    """``code`` in a new notebook's first cell, once its kernel is up; the cell's output. A new
    notebook whose loading Chromium abandoned is opened again, as a user would (CI saw one)."""
    first = (By.CSS_SELECTOR, ".jp-Cell .cm-content")
    for _ in range(3):
        launcher_card(driver, url, user, "Python 3").click()
        # the notebook open, then its kernel up (a cell run before it is connected can be lost on
        # a loaded machine)
        wait_for(driver, 60).until(lambda d: d.find_elements(*first) or _fetch_failed(d))
        wait_for(driver, 90).until(
            lambda d: "Idle" in d.find_element(By.ID, "jp-main-statusbar").text or _fetch_failed(d)
        )
        if not _fetch_failed(driver):
            break
        time.sleep(2)
    else:
        raise AssertionError(f"JupyterLab could not load a new notebook 3 times: {said(driver)}")
    # the cell found again after that: the notebook redraws it meanwhile (a fresh CI run met the
    # cell found before gone stale)
    cell = wait_for(driver, 60).until(ready.element_to_be_clickable(first))
    cell.click()
    cell.send_keys(code)
    cell.send_keys(Keys.SHIFT, Keys.ENTER)
    return wait_for(driver, 60).until(
        lambda d: next(
            (o.text for o in d.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output") if o.text),
            None,
        )
    )


def queue_view_lists(driver: WebDriver, url: str, user: str, job: str) -> None:
    """jupyterlab-slurm's queue view, opened from the launcher, lists ``job``. A view whose
    request Chromium abandoned (a host network change) is opened again, up to 3 times."""
    for _ in range(3):
        launcher_card(driver, url, user, "Slurm Dashboard").click()
        try:
            wait_for(driver, 60).until(lambda d: job in d.find_element(By.TAG_NAME, "body").text)
            return
        except TimeoutException:
            continue
    raise AssertionError(f"the queue view did not list job {job} in 3 openings: {said(driver)}")


def forbidden(driver: WebDriver, url: str, owner: str) -> bool:
    """Whether the logged-in user is refused ``owner``'s JupyterLab (the hub's 403)."""
    driver.get(f"{url}/user/{owner}/lab")
    try:
        wait_for(driver, 30).until(lambda d: "403" in d.title or "403 : Forbidden" in d.page_source)
    except TimeoutException:
        return False
    return not driver.find_elements(By.ID, "jp-main-dock-panel")


def type_in_terminal(driver: WebDriver, url: str, user: str, line: str) -> None:
    """``line`` typed into a new JupyterLab terminal, once its shell has had a moment for its
    prompt, and sent."""
    launcher_card(driver, url, user, "Terminal").click()
    terminal = wait_for(driver).until(
        ready.presence_of_element_located((By.CSS_SELECTOR, ".jp-Terminal textarea"))
    )
    time.sleep(2)  # the shell's prompt
    terminal.send_keys(line + Keys.ENTER)
