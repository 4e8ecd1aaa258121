#!/usr/bin/env bash
# The tree's C and C++ sources (every tracked .c, .h, .cpp, .hpp, .cu, .cuh) against the root's
# .clang-format, with clang-format 14 (Debian 12's `clang-format`; the style's choices were made
# with it, and other versions break some lines differently):
#   bash tools/format.sh check   lists the files clang-format would change, with the lines added
#                                and removed, and exits 1 if there is any (ctest: format.check)
#   bash tools/format.sh apply   formats them all in place
# clang-format-14, else clang-format, from PATH; CLANG_FORMAT names another. Needs a git checkout
# (the files are git's list).
set -euo pipefail

mode="${1:-}"
case "$mode" in check | apply) ;; *)
  echo "usage: bash tools/format.sh check|apply" >&2
  exit 2
  ;;
esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."

clang_format="${CLANG_FORMAT:-}"
if [ -z "$clang_format" ]; then
  clang_format="$(command -v clang-format-14 || command -v clang-format || true)"
fi
if [ -z "$clang_format" ] || ! command -v "$clang_format" > /dev/null; then
  echo "format.sh: clang-format not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi
version="$("$clang_format" --version)"
if ! [[ "$version" =~ version\ 14\. ]]; then
  echo "format.sh: warning: .clang-format is meant for clang-format 14; this is: $version" >&2
fi

if ! git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  echo "format.sh: not a git checkout: the files to format are git's tracked ones" >&2
  exit 2
fi
files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && files+=("$f")  # tracked, not deleted in the working tree
done < <(git ls-files -z -- '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')

if [ "$mode" = apply ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$clang_format" --style=file -i
  echo "format.sh: formatted ${#files[@]} files with $clang_format"
  exit 0
fi

# check: a copy of the files formatted (one clang-format for them all, the root's .clang-format
# beside them) and compared with another (one diff, counted per file).
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/a" "$scratch/b"
cp .clang-format "$scratch/b/"
printf '%s\0' "${files[@]}" | xargs -0 cp --parents -t "$scratch/a"
printf '%s\0' "${files[@]}" | xargs -0 cp --parents -t "$scratch/b"
(cd "$scratch/b" && printf '%s\0' "${files[@]}" | xargs -0 "$clang_format" --style=file -i)
rm "$scratch/b/.clang-format"
(cd "$scratch" && { diff -r -U0 a b || [ $? -eq 1 ]; }) | awk -v total="${#files[@]}" '
  function flush() { if (f != "") { printf "  %s (+%d -%d)\n", f, add, del; n++ } }
  /^\+\+\+ b\// { flush(); f = substr($2, 3); add = del = 0; next }
  /^--- a\// { next }
  /^\+/ { add++; added++ }
  /^-/ { del++; removed++ }
  END {
    flush()
    if (n) {
      printf "format.sh: %d of %d files differ from .clang-format (+%d -%d lines);", n, total,
        added, removed
      print " bash tools/format.sh apply formats them"
      exit 1
    }
    printf "format.sh: all %d files follow .clang-format\n", total
  }'
