#!/usr/bin/env bash
# The browsers the console's tests drive: Debian's Chromium (/usr/bin/chromium) and Firefox ESR
# (/usr/bin/firefox-esr), installed with apt-get when missing (as root, or through sudo without
# a password). Playwright's own browser download is not used: it reaches hosts these machines
# cannot.
set -euo pipefail
chromium=${ZEROLAYER_CHROMIUM:-/usr/bin/chromium}
firefox=${ZEROLAYER_FIREFOX:-/usr/bin/firefox-esr}
missing=()
[ -x "$chromium" ] || missing+=(chromium)
[ -x "$firefox" ] || missing+=(firefox-esr)
if [ ${#missing[@]} = 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "the console's tests need ${missing[*]}: install Debian's packages" \
    "(apt-get install ${missing[*]}) or set ZEROLAYER_CHROMIUM / ZEROLAYER_FIREFOX" >&2
  exit 1
fi
printf '\033[1m[setup]\033[0m browsers for the console tests (apt-get install %s)\n' "${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >&2
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >&2
