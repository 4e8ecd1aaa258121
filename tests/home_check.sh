#!/usr/bin/env bash
# Tests never read or write the invoking user's models or caches: ctest gives every test a home
# of its own (HOME and XDG_CACHE_HOME under the build directory), and this script, run before
# and after every test as a ctest fixture, checks that the user's own home was left as it was.
#
#   bash tests/home_check.sh prepare TEST_HOME STATE   empties TEST_HOME; records the user's home
#   bash tests/home_check.sh compare TEST_HOME STATE   fails, naming them, on any change
#
# What is recorded: hcr's cache directory (every file under $XDG_CACHE_HOME/hcr, or
# ~/.cache/hcr: learned models, program caches) with sizes and modification times, and the names
# of the entries directly in $HOME (a stray file a test left there).
set -euo pipefail
mode="$1" test_home="$2" state="$3"

snapshot() {
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/hcr"
  if [ -d "$cache" ]; then
    find "$cache" -printf 'cache %P %s %T@\n' | LC_ALL=C sort
  fi
  if [ -d "$HOME" ]; then
    find "$HOME" -mindepth 1 -maxdepth 1 -printf 'home %f\n' | LC_ALL=C sort
  fi
}

case "$mode" in
  prepare)
    rm -rf "$test_home"
    mkdir -p "$test_home/.cache"
    chmod 700 "$test_home"
    snapshot > "$state"
    ;;
  compare)
    if ! diff <(cat "$state") <(snapshot) > "$state.diff"; then
      echo "the tests changed the invoking user's home ($HOME): lines '<' were there before, '>' now"
      cat "$state.diff"
      exit 1
    fi
    echo "the user's home ($HOME) and hcr's cache there are as before the tests"
    ;;
  *)
    echo "usage: home_check.sh prepare|compare TEST_HOME STATE" >&2
    exit 2
    ;;
esac
