#!/bin/sh
# Install Debian's chromium for the browser test (tests/web/test_browser.py).
#
# Idempotent and quiet; never fails the build: when chromium cannot be installed (no apt,
# not root, no network) it says so and exits 0, and the browser test skips itself.
# Playwright drives this binary (executable_path=/usr/bin/chromium); Playwright's own
# browser download is not used.
CHROMIUM=${RSJOBS_CHROMIUM:-/usr/bin/chromium}

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-browser: $CHROMIUM is missing and apt-get is not available; the browser test will be skipped"
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-browser: not root and no password-less sudo; cannot install chromium (the browser test will be skipped)"
        exit 0
    fi
fi
echo "install-browser: installing Debian's chromium (apt-get)..."
export DEBIAN_FRONTEND=noninteractive
if $SUDO apt-get update -qq >/dev/null 2>&1 \
    && $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
    && [ -x "$CHROMIUM" ]; then
    echo "install-browser: chromium installed at $CHROMIUM"
else
    echo "install-browser: could not install chromium; the browser test will be skipped"
fi
exit 0
