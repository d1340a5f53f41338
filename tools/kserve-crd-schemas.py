#!/usr/bin/env python3
"""Writes the OpenAPI v3 schemas of KServe's ClusterServingRuntime and InferenceService
CRDs, as a KServe release ships them, to tests/data/kserve/ (gzipped JSON): what
deploy/kserve/'s manifests are validated against (CI cannot fetch).

    tools/kserve-crd-schemas.py KSERVE_CHECKOUT TAG

KSERVE_CHECKOUT: a git clone of kserve/kserve (a bare one does); TAG: its release tag.
"""

import gzip
import json
import os
import subprocess
import sys

import yaml

CRDS = {"ClusterServingRuntime": "serving.kserve.io_clusterservingruntimes.yaml",
        "InferenceService": "serving.kserve.io_inferenceservices.yaml"}
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "kserve")


def main():
    checkout, tag = sys.argv[1:3]
    for kind, name in CRDS.items():
        text = subprocess.run(["git", "-C", checkout, "show", f"{tag}:config/crd/full/{name}"],
                              check=True, capture_output=True, text=True).stdout
        crd = next(d for d in yaml.safe_load_all(text) if d)
        schemas = {v["name"]: v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"]}
        out = {"kserve_tag": tag, "kind": kind, "group": crd["spec"]["group"],
               "versions": schemas}
        path = os.path.join(OUT, f"{kind}.schema.json.gz")
        with gzip.GzipFile(path, "wb", mtime=0) as f:
            f.write(json.dumps(out, sort_keys=True, separators=(",", ":")).encode())
        print(f"wrote {path}: {sorted(schemas)}")


if __name__ == "__main__":
    main()
