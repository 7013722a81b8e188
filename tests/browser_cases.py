"""What the Playwright browser tests share: Debian's Chromium and how it is launched,
and the script that lists elements whose text is clipped (scroll width > client width)."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# every visible element matching the selector whose content is wider than its box
CLIPPED_JS = """(selector) => {
  const out = [];
  for (const el of document.querySelectorAll(selector)) {
    if (el.offsetParent === null || el.clientWidth === 0) continue;  // hidden or inline
    if (el.scrollWidth > el.clientWidth + 1) out.push(`${el.tagName}.${el.className} '${el.innerText.slice(0, 60)}' ${el.scrollWidth}>${el.clientWidth}`);
  }
  return out;
}"""


def launched_chromium():
    """Yield a headless Chromium (Playwright on Debian's binary, never `playwright
    install`); fails, not skips, when the binary is missing."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} missing: `make browser` installs it (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
