"""deploy/kserve/'s manifests validate against the OpenAPI schemas of KServe's released
CRDs (tests/data/kserve/, written by tools/kserve-crd-schemas.py from a KServe tag), as
the API server would: types, enums and required fields by JSON schema, and every field
known to the schema (kubectl's strict field validation); a manifest with a misspelt
field or a wrong type fails. And the runtime's arguments are flags chorus-server takes."""

import glob
import gzip
import json
import os
import re
import subprocess

import jsonschema
import pytest
import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "deploy", "kserve", "*.yaml")))
SCHEMAS = os.path.join(ROOT, "tests", "data", "kserve")


def schema_of(manifest):
    path = os.path.join(SCHEMAS, f"{manifest['kind']}.schema.json.gz")
    with gzip.open(path) as f:
        crd = json.load(f)
    group, version = manifest["apiVersion"].split("/")
    assert group == crd["group"], manifest["apiVersion"]
    return crd["versions"][version]


def unknown_fields(value, schema, path="$"):
    """Fields the schema does not declare (the API server prunes or, strictly, refuses
    them); metadata is Kubernetes' ObjectMeta, which the CRD leaves open."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields") or "properties" not in schema:
            return []
        found = []
        for key, item in value.items():
            if key in schema["properties"]:
                found += unknown_fields(item, schema["properties"][key], f"{path}.{key}")
            elif not isinstance(schema.get("additionalProperties"), dict):
                found.append(f"{path}.{key}")
        return found
    if isinstance(value, list) and "items" in schema:
        return [f for i, item in enumerate(value)
                for f in unknown_fields(item, schema["items"], f"{path}[{i}]")]
    return []


def problems(manifest):
    schema = schema_of(manifest)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft7Validator(schema).iter_errors(manifest)]
    return errors + [f"unknown field {f}" for f in unknown_fields(manifest, schema)]


@pytest.mark.parametrize("path", MANIFESTS, ids=os.path.basename)
def test_each_manifest_validates_against_kserves_crd(path):
    with open(path) as f:
        manifest = yaml.safe_load(f)
    assert manifest["metadata"]["name"]
    assert problems(manifest) == []


def test_the_check_fails_on_a_misspelt_field_and_a_wrong_type():
    with open(os.path.join(ROOT, "deploy", "kserve", "clusterservingruntime.yaml")) as f:
        manifest = yaml.safe_load(f)
    manifest["spec"]["protocolVersion"] = ["v2"]  # protocolVersions
    manifest["spec"]["supportedModelFormats"][0]["priority"] = "first"
    found = problems(manifest)
    assert "unknown field $.spec.protocolVersion" in found
    assert any("priority" in p and "'first' is not of type 'integer'" in p for p in found)


def test_the_runtime_passes_flags_chorus_server_takes():
    with open(os.path.join(ROOT, "deploy", "kserve", "clusterservingruntime.yaml")) as f:
        runtime = yaml.safe_load(f)
    (container,) = runtime["spec"]["containers"]
    server = os.path.join(os.environ["CHORUS_BIN_DIR"], "chorus-server")
    usage = subprocess.run([server, "--help"], capture_output=True, text=True).stdout
    for arg in container["args"]:
        flag = arg.split("=")[0]
        assert re.search(rf"[ ,]{re.escape(flag)}[ ,]", usage), flag
    assert set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    probes = {container[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    assert probes == {"/v2/health/ready", "/v2/health/live"}
