#!/usr/bin/env bash
# The manual pages: each docs/man/*.scd builds (scripts/build-man.sh), man -l
# renders it without a single groff or man warning, its header and NAME
# match its file name, no source line is one scdoc would silently eat,
# no merge leftover (an entry doubled or glued, prose said twice),
# and nothing the code accepts is missing from it:
# every command `cordon-server --help` lists, every long option the two
# programs parse, every manifest key and every config.json key. Installs
# scdoc and man-db when missing (as root).
# Usage: scripts/test-man.sh [BUILD_DIR]   (default build; the command
# check needs BUILD_DIR/cordon-server, and is skipped without it)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}

missing=()
command -v scdoc >/dev/null 2>&1 || missing+=(scdoc)
command -v man >/dev/null 2>&1 || missing+=(man-db)
command -v groff >/dev/null 2>&1 || missing+=(groff-base)
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "test-man: need root to apt-get install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fails=0
fail() {
  echo "test-man: FAIL: $*" >&2
  fails=$((fails + 1))
}

# scdoc silently drops a '.' that starts a line (roff would take it as a
# request), so such a line loses text: keep none in the sources.
if grep -nE "^[[:space:]]*[.']" docs/man/*.scd >"$out/dots"; then
  fail "a line starts with '.' or a quote (reword it): $(tr '\n' ' ' <"$out/dots")"
fi
# Merge leftovers: a command's entry twice in a row (a doubled synopsis),
# an entry glued to the paragraph before it (no blank line), or the same
# run of 12 words twice in a page's prose (a paragraph spliced into
# another). Synopsis lines (an entry's first line) may repeat options.
if ! python3 - docs/man/*.scd >"$out/leftovers" <<'PY'; then
import re, sys
bad = 0
for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    prose = []
    for i, line in enumerate(lines):
        # an entry: a line at column 0 that opens with *word* and whose
        # next line is its indented body (prose at column 0 is a paragraph)
        term = re.match(r"\*([a-z][a-z-]*)\*", line)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if term and nxt.startswith("\t"):
            prev = lines[i - 1] if i else ""
            m = re.match(r"\*([a-z][a-z-]*)\*", prev)
            if prev.startswith("\t"):
                print(f"{path}:{i + 1}: entry *{term.group(1)}* glued to the body before it")
                bad = 1
            elif m and m.group(1) == term.group(1):
                print(f"{path}:{i + 1}: entry *{term.group(1)}* doubled")
                bad = 1
        elif line.startswith("\t"):
            prose += re.findall(r"[a-z0-9]+", re.sub(r"[*_]", "", line.lower()))
    seen = {}
    for k in range(len(prose) - 12):
        run = " ".join(prose[k:k + 12])
        if run in seen and k - seen[run] >= 12:
            print(f"{path}: prose said twice: {run}")
            bad = 1
            break
        seen.setdefault(run, k)
sys.exit(bad)
PY
  fail "merge leftovers in the man pages: $(tr '\n' ' ' <"$out/leftovers")"
fi
scripts/build-man.sh "$out" >"$out/built"
want=(cordon-server.8 cordon-agent.8 cordon-manifest.5)
for page in "${want[@]}"; do
  grep -qx "$out/$page" "$out/built" || fail "$page was not built"
done

# Render each page as man does and as lintian checks it; any warning fails.
for f in "$out"/*.[0-9]; do
  page=$(basename "$f")
  name=${page%.*} section=${page##*.}
  head=$(grep -m1 '^\.TH ' "$f" || true)
  case "$head" in
  ".TH \"$name\" \"$section\""*) ;;
  *) fail "$page: header is '$head'" ;;
  esac
  warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l -Tutf8 -Z "$f" 2>&1 >/dev/null || echo "man exited $?")
  [ -z "$warnings" ] || fail "$page: man -l: $warnings"
  LC_ALL=C.UTF-8 MANWIDTH=80 man -l "$f" 2>/dev/null | col -b >"$out/$page.txt" || fail "$page: man -l failed"
  grep -qE "^ +$name - " "$out/$page.txt" || fail "$page: no '$name - ' line under NAME"
  # one line, no hyphenation, breaks after a '-' undone: words are whole
  LC_ALL=C.UTF-8 MANROFFOPT=-rHY=0 MANWIDTH=80 man -l "$f" 2>/dev/null | col -b |
    perl -0777 -pe 's/-\n[ \t]*/-/g; s/\s+/ /g' >"$out/$page.flat"
  for s in NAME DESCRIPTION 'SEE ALSO'; do
    grep -qx "$s" "$out/$page.txt" || fail "$page: no $s section"
  done
done
echo "test-man: built and rendered: $(cd "$out" && echo *.[0-9])"

# What the code accepts must be in the pages. $1 page, $2 what, rest: words.
expect_words() {
  local page=$1 what=$2
  shift 2
  local w n=0
  for w in "$@"; do
    n=$((n + 1))
    grep -qF -- "$w" "$out/$page.flat" || fail "$page does not mention $what $w"
  done
  [ "$n" -gt 0 ] || fail "found no $what in the code to check $page against"
}
mapfile -t server_opts < <(grep -ho '{"[a-z-]*", \(required\|no\)_argument' server/*.c |
  sed 's/{"\([a-z-]*\)".*/--\1/' | sort -u)
expect_words cordon-server.8 option "${server_opts[@]}"
mapfile -t agent_opts < <(grep -ho 'strcmp([a-z]*\(\[[a-z]*\]\)\?, "--[a-z-]*")' agent/*.c |
  sed 's/.*"\(--[a-z-]*\)".*/\1/' | grep -vx -- -- | sort -u)
expect_words cordon-agent.8 option "${agent_opts[@]}"
mapfile -t agent_cmds < <(grep -ho 'strcmp(c\.cmd, "[a-z-]*")' agent/main.c |
  sed 's/.*"\([a-z-]*\)".*/\1/' | sort -u)
expect_words cordon-agent.8 command "${agent_cmds[@]}" service
mapfile -t manifest_keys < <(grep -ho 'strcmp(key, "[a-z_]*")' core/manifest.c |
  sed 's/.*"\([a-z_]*\)".*/\1/' | sort -u)
expect_words cordon-manifest.5 key "${manifest_keys[@]}"
mapfile -t config_keys < <(grep -ho 'strcmp(key, "[a-z_]*")' agent/config.c |
  sed 's/.*"\([a-z_]*\)".*/\1/' | sort -u)
expect_words cordon-agent.8 config.json "${config_keys[@]}"
if [ -x "$build/cordon-server" ]; then
  mapfile -t server_cmds < <("$build/cordon-server" --help |
    sed -n '/^commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p')
  expect_words cordon-server.8 command "${server_cmds[@]}"
else
  echo "test-man: no $build/cordon-server: the command list was not checked" >&2
fi

if [ "$fails" -ne 0 ]; then
  echo "test-man: $fails failure(s)" >&2
  exit 1
fi
echo "test-man: ok (options, commands, manifest and config keys all documented)"
