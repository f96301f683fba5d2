#!/usr/bin/env bash
# A GPU discovery script for tests: hands each Spark worker on this machine a different fake GPU id,
# claimed with mkdir (atomic) under $HOPSML_FAKE_GPU_DIR.
for id in 0 1 2 3 4 5 6 7; do
  if mkdir "${HOPSML_FAKE_GPU_DIR:?}/$id" 2>/dev/null; then
    echo "{\"name\": \"gpu\", \"addresses\": [\"$id\"]}"
    exit 0
  fi
done
echo '{"name": "gpu", "addresses": []}'
