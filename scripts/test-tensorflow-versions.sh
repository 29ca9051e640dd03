#!/usr/bin/env bash
# Run the whole test suite against other TensorFlow versions (not CI: each takes a fresh venv, ~1 GB).
#
#   scripts/test-tensorflow-versions.sh              # the oldest and the newest supported: 2.19.1 2.21.0
#   scripts/test-tensorflow-versions.sh 2.20.0       # any others
#
# For each version: a venv .venv-tf<version> with fuselite[test] (the test tools, unpinned TensorFlow),
# tensorflow and tf-keras of that version (tf-keras depends on tensorflow, not tensorflow-cpu); then
# pytest as `make test` runs it. The last lines of each run go to scripts/tensorflow-versions.log and
# stdout. docs/compatibility.md records the results.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
versions=${*:-"2.19.1 2.21.0"}
log=scripts/tensorflow-versions.log
: > "$log"
status=0
for v in $versions; do
  minor=${v%.*}
  case "$minor" in  # tf-keras releases follow TensorFlow's minor version
    2.20) tfk="tf-keras==2.20.1" ;;
    *) tfk="tf-keras==${minor}.*" ;;
  esac
  venv=".venv-tf$v"
  echo "== TensorFlow $v ($tfk) in $venv" | tee -a "$log"
  test -x "$venv/bin/python" || "$PYTHON" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --quiet --upgrade pip ||
     ! "$venv/bin/python" -m pip install --quiet -e ".[test]" "tensorflow==$v" "$tfk"; then
    echo "TensorFlow $v: install failed" | tee -a "$log"; status=1; continue
  fi
  "$venv/bin/python" -c "import tensorflow as tf, tf_keras, keras, ai_edge_litert; print('TensorFlow', tf.__version__, '| tf-keras', tf_keras.__version__, '| Keras', keras.__version__)" 2>/dev/null | tee -a "$log"
  start=$(date +%s)
  "$venv/bin/python" -m pytest -n 2 --dist loadfile -q tests > "$venv/pytest.log" 2>&1
  rc=$?
  tail -n 25 "$venv/pytest.log" | grep -E "^(FAILED|ERROR)|passed|failed" | tee -a "$log"
  echo "TensorFlow $v: pytest exit $rc in $(( $(date +%s) - start )) s" | tee -a "$log"
  [ $rc -eq 0 ] || status=1
done
exit $status
