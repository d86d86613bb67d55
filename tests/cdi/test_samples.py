"""cdi-samples/broken: each file shows one defect; a bad file hides nothing else.
cdi-samples/crash: a file the library panics on hides everything."""

from __future__ import annotations

from pathlib import Path

from cgpu.cdi.scan import scan_spec_dirs

BROKEN = Path(__file__).resolve().parents[2] / "cdi-samples" / "broken"
CRASH = BROKEN / "crash"  # a subdir: the scan of broken/ skips it

RESOLVABLE = [
    "example.com/case-variant=gpu0",
    "example.com/first-document=first",
    "example.com/gpu=0",
    "example.com/gpu=all",
    "example.com/venus=venus",
    "example.org/accel=a",
    "example.org/accel=b",
]
# file -> a piece of the error message it gets
ERRORS = {
    "alias-bomb.yaml": "document contains excessive aliasing",
    "bad-device-name-with-space.yaml": "invalid character ' ' in device name",
    "bad-kind-no-class.yaml": "invalid vendor. empty name",
    "conflict-a.yaml": 'conflicting device "example.org/accel=all"',
    "conflict-b.json": 'conflicting device "example.org/accel=all"',
    "duplicate-device-name.yaml": 'invalid spec, multiple device "0"',
    "duplicate-key-kind.yaml": 'key "kind" is already set',
    "empty-device-edits.yaml": "invalid device, empty device edits",
    "empty-file.yaml": "no Spec data",
    "invalid-version-1.2.0.yaml": 'invalid version "1.2.0"',
    "invalid-version-unquoted-float.yaml": 'invalid version "0.5"',
    "malformed-json-missing-comma.json": "not valid YAML",
    "malformed-yaml-bad-indentation.yaml": "not valid YAML",
    "no-devices.yaml": "invalid spec, no devices",
    "not-utf8-latin1-bytes.yaml": "not UTF-8",
    "unknown-field-enablecmt-dropped-in-1.1.0.yaml": 'unknown field "enableCMT"',
    "unknown-field-hostpaths.yaml": 'unknown field "hostPaths"',
    "version-too-low-for-hostpath.yaml": "the spec version must be at least v0.5.0 (it uses deviceNodes[].hostPath)",
}
WARNINGS = {
    "case-variant-hostpath-accepted.yaml": "matches keys case-insensitively",
}


def test_broken_samples():
    result = scan_spec_dirs([str(BROKEN)])
    assert sorted(result.devices) == RESOLVABLE
    seen: dict[str, list[tuple[str, str]]] = {}
    for severity, path, message in result.problems:
        seen.setdefault(Path(path).name, []).append((severity, message))
    assert set(seen) == set(ERRORS) | set(WARNINGS)  # ignored-extension.yml: silently ignored
    for name, fragment in ERRORS.items():
        assert all(severity == "error" for severity, _ in seen[name]) and fragment in seen[name][0][1], name
    for name, fragment in WARNINGS.items():
        assert seen[name] == [("warning", seen[name][0][1])] and fragment in seen[name][0][1], name


def test_every_sample_is_named_in_this_test():
    on_disk = {path.name for path in BROKEN.iterdir() if path.suffix in (".json", ".yaml")}
    accepted = {
        "good-example.com-gpu.yaml",
        "yaml-content-in-json-file-valid.json",
        "multiple-documents-first-counts.yaml",
    }
    assert on_disk == set(ERRORS) | set(WARNINGS) | accepted
    assert (BROKEN / "ignored-extension.yml").is_file()


def test_a_crash_sample_takes_the_whole_load_with_it():
    result = scan_spec_dirs([str(CRASH)])
    assert result.devices == {}
    panics = [message for _, path, message in result.problems if path.endswith("panics-v1.1.0.yaml")]
    assert any("crashes (panics) on this file" in message for message in panics)
    assert any('"example.com/gpu=0"' not in m and "example.com/gpu=0" in m for m in panics)  # what is lost
    main = scan_spec_dirs([str(CRASH)], library="main")
    assert "example.net/g=gpu0" in main.devices and "example.com/gpu=0" in main.devices
