# Source on the GPU machine: install the carried wheels and kiln itself (no network there).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v -i warning
export PYTHONUNBUFFERED=1
