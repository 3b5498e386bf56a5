# Source on the GPU machine: install the carried wheels and kiln itself (no network there).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning
export PYTHONUNBUFFERED=1
# An installed package has its bytecode compiled; a fresh copy of the tree does not.
python3 -m compileall -q -j 8 frontend ir codegen proto cache daemon /tmp/site > /dev/null 2>&1
