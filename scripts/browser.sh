#!/usr/bin/env bash
# The browser the console's tests drive: Debian's Chromium (/usr/bin/chromium), installed with
# apt-get when it is missing (as root, or through sudo without a password). Playwright's own
# browser download is not used: it reaches hosts these machines cannot.
set -euo pipefail
browser=${ZEROLAYER_CHROMIUM:-/usr/bin/chromium}
if [ -x "$browser" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "the console's tests need Chromium at $browser: install Debian's chromium package" \
    "(apt-get install chromium) or set ZEROLAYER_CHROMIUM to a Chromium binary" >&2
  exit 1
fi
printf '\033[1m[setup]\033[0m Chromium for the console tests (apt-get install chromium)\n' >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq chromium >&2
"$browser" --version >&2
