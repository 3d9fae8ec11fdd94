"""Pages in a real browser: Debian's Chromium driven by Playwright (never a downloaded one)."""

import os
import re
import shutil

import pytest

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# around it are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("AGENTPORTAL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Chromium not found at {CHROMIUM}: install Debian's chromium package")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture
def signed_in(browser, live_server):
    """signed_in("sam") -> a page of a fresh browser context, signed in through the form."""
    contexts = []

    def sign_in(username: str, password: str = "demo"):
        context = browser.new_context()
        contexts.append(context)
        page = context.new_page()
        # Whatever the Content-Security-Policy blocks would be a page that half works.
        page.on(
            "console",
            lambda message: (
                "Content Security Policy" in message.text and blocked.append(message.text)
            ),
        )
        page.goto(f"{live_server.url}/portal/")
        page.fill("#id_username", username)
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        # Supervisors land on their inbox, customers on their chat.
        page.wait_for_url(re.compile(re.escape(f"{live_server.url}/portal/") + "(chat/)?$"))
        return page

    blocked: list[str] = []
    yield sign_in
    for context in contexts:
        context.close()
    assert blocked == [], blocked


def screenshot(page, name: str) -> None:
    folder = os.path.join(os.path.dirname(__file__), "..", "..", "artifacts", "screenshots")
    os.makedirs(folder, exist_ok=True)
    page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)
