"""Where cgpu once disagreed with the CDI library engines vendor (v1.1.0), one test per class of
disagreement (A, K, G, H, I, B2, C, E, M, N), and the messages' limits on quoting a file."""

from __future__ import annotations

import os
import stat
import sys

import pytest
import yaml

from cgpu.cdi.parse import SpecError, parse_spec
from cgpu.cdi.scan import scan_spec_dirs

from .conftest import minimal, write


def parse(text: str | bytes, **options):
    return parse_spec(text.encode() if isinstance(text, str) else text, path="/etc/cdi/x.yaml", **options)


def rejection(text: str | bytes, **options) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse(text, **options)
    return caught.value


def one_device(edits: str, version: str = "0.3.0", kind: str = "vendor.com/gpu") -> str:
    return f'cdiVersion: "{version}"\nkind: {kind}\ndevices:\n- name: gpu0\n  containerEdits: {edits}\n'


# A: `permissions: none` exists only on main; v1.1.0's (*DeviceNode).Validate takes r, w, m.
def test_a_permissions_none_is_rejected_by_v110_and_read_on_main():
    text = one_device("{deviceNodes: [{path: /dev/x, permissions: none}]}")
    error = rejection(text)
    assert error.by_library and not error.crash
    assert error.message.endswith('device "/dev/x": invalid permissions "none"')
    assert parse(text, library="main").devices[0].edits.device_nodes[0].permissions == "none"


# K: requiresV050/V040 see the last device's edits for every device (go 1.19 loop variable).
def test_k_the_minimum_version_sees_only_the_last_devices_edits():
    first_only = (
        'cdiVersion: "0.3.0"\nkind: vendor.com/gpu\ndevices:\n'
        "- name: gpu0\n  containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/y}], "
        "mounts: [{hostPath: /a, containerPath: /b, type: bind}]}\n"
        "- name: gpu1\n  containerEdits: {env: [A=1]}\n"
    )
    assert [device.name for device in parse(first_only).devices] == ["gpu0", "gpu1"]
    last = one_device("{deviceNodes: [{path: /dev/x, hostPath: /dev/y}]}")
    assert "must be at least v0.5.0" in rejection(last).message
    spec_level = minimal() + "containerEdits: {mounts: [{hostPath: /a, containerPath: /b, type: bind}]}\n"
    assert "must be at least v0.4.0" in rejection(spec_level).message


# G: go-yaml v2 reads only %YAML 1.1.
@pytest.mark.parametrize("directive", ["%YAML 1.2", "%YAML 2.0", "# a comment\n%YAML 1.2"])
def test_g_a_yaml_directive_other_than_1_1_is_rejected(directive):
    assert "found incompatible YAML document" in rejection(f"{directive}\n---\n{minimal()}").message
    assert parse(f"%YAML 1.1\n---\n{minimal()}").kind == "example.com/gpu"


# H: go-yaml v2 has no `\/` escape (libyaml and PyYAML do), and has `\'` (they do not).
def test_h_escapes_are_go_yamls():
    php = (
        r'{"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[{"name":"gpu0",'
        r'"containerEdits":{"deviceNodes":[{"path":"\/dev\/x"}]}}]}'
    )
    assert "unknown escape character" in rejection(php).message
    assert parse(one_device(r'{env: ["A=it\'s"]}')).devices[0].edits.env == ("A=it's",)
    assert parse(one_device(r'{env: ["A=\\/x"]}')).devices[0].edits.env == ("A=\\/x",)


# I: in go-yaml v2 a plain scalar ends at ":" only before a blank, also inside [] and {}.
@pytest.mark.parametrize("env", ["[PATH=/usr/bin:]", "[A=x:, B=y]"])
def test_i_a_plain_scalar_ending_in_a_colon_in_a_flow_collection(env):
    spec = parse(one_device(f"{{env: {env}}}"))
    assert spec.devices[0].edits.env[0] in ("PATH=/usr/bin:", "A=x:")


# B2: v1.1.0 checks the version, then panics on a one-character vendor or class before any
# other check: the whole spec-dir load is lost, and cgpu says so.
def test_b2_a_one_character_vendor_crashes_even_in_a_file_invalid_for_another_reason(tmp_path):
    text = one_device("{env: [NOEQ]}", kind="a/gpu")
    error = rejection(text)
    assert error.crash and "panics" in error.message
    assert not rejection(one_device("{env: [NOEQ]}", version="9", kind="a/gpu")).crash  # the version comes first
    etc = tmp_path / "etc"
    write(etc, "a.yaml", text)
    write(etc, "good.yaml", minimal())
    result = scan_spec_dirs([str(etc)])
    assert result.devices == {} and result.crashed == [str(etc / "a.yaml")]
    messages = [message for _, _, message in result.problems]
    assert any("crashes (panics) on this file" in m for m in messages)
    assert any("load of every spec dir crashes" in m and "example.com/gpu=gpu0" in m for m in messages)


# C: a null entry in hooks, netDevices, deviceNodes or mounts is dereferenced (a panic, on
# v1.1.0 and main), unless an earlier check fails first.
@pytest.mark.parametrize(
    ("edits", "version", "where"),
    [
        ("{hooks: [~]}", "0.3.0", "containerEdits.hooks"),
        ("{netDevices: [~]}", "1.1.0", "containerEdits.netDevices"),
        ("{deviceNodes: [~]}", "0.3.0", "containerEdits.deviceNodes"),
        ("{mounts: [~]}", "0.3.0", "containerEdits.mounts"),
    ],
)
def test_c_null_entries_crash_the_library(tmp_path, edits, version, where):
    error = rejection(one_device(edits, version=version))
    assert error.crash and where in error.message and "v1.1.0 and main" in error.message
    assert rejection(one_device(edits, version=version), library="main").crash
    etc = tmp_path / "etc"
    write(etc, "a-null.yaml", one_device(edits, version=version))
    write(etc, "b-good.yaml", minimal())
    assert scan_spec_dirs([str(etc)]).devices == {}


@pytest.mark.parametrize(
    "text",
    [  # found by scripts/diff_cdi.py: requiresV050 returns at the first hostPath, before a later null
        'cdiVersion: "0.3.0"\ncontainerEdits: {deviceNodes: [null]}\nkind: v.com/gpu\ndevices:\n'
        "- containerEdits: {deviceNodes: [{hostPath: /dev/y}]}\n",
        'cdiVersion: "0.5.0"\nkind: v.com/gpu\ndevices:\n- containerEdits: {deviceNodes: [{hostPath: /dev/y}, null]}\n',
    ],
)
def test_c_a_null_entry_after_the_first_hostpath_is_not_reached_by_the_version_check(text):
    assert not rejection(text).crash


def test_c_an_earlier_error_wins_over_a_null_entry():
    text = one_device("{env: [BAD], hooks: [~]}")
    error = rejection(text)
    assert not error.crash and "invalid environment variable" in error.message


# E: go-yaml's alias rule is a ratio; what it reads, cgpu reads.
def test_e_a_dump_sharing_one_edits_object_is_read():
    edits = {  # an 8-GPU node's edits: about 60 nodes, shared by every device
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": f"/dev/nvidia{i}", "permissions": "rw"} for i in range(8)],
        "mounts": [{"hostPath": f"/usr/lib/lib{i}.so", "containerPath": f"/usr/lib/lib{i}.so"} for i in range(4)],
    }
    spec = {
        "cdiVersion": "0.3.0",
        "kind": "vendor.com/gpu",
        "devices": [{"name": f"d{i}", "containerEdits": edits} for i in range(1300)],
    }
    text = yaml.safe_dump(spec)
    assert "*id001" in text
    assert len(parse(text).devices) == 1300


# M: v1.1.0's filepath.Walk reads a spec dir that is itself a *.yaml or *.json file.
def test_m_a_spec_dir_that_is_a_yaml_file_is_read(tmp_path):
    path = write(tmp_path, "single.yaml", minimal())
    result = scan_spec_dirs([str(path)])
    assert list(result.devices) == ["example.com/gpu=gpu0"]
    other = write(tmp_path, "notes.txt", minimal())
    assert scan_spec_dirs([str(other)]).devices == {}


def test_spec_dirs_as_the_main_branch_reads_them(tmp_path):
    real = tmp_path / "real"
    write(real, "a.yaml", minimal())
    (tmp_path / "link").symlink_to(real)
    assert scan_spec_dirs([str(tmp_path / "link")]).devices == {}  # v1.1.0: Walk does not enter it
    assert list(scan_spec_dirs([str(tmp_path / "link")], library="main").devices) == ["example.com/gpu=gpu0"]
    single = write(tmp_path, "single.yaml", minimal(kind="example.com/other"))
    stopped = scan_spec_dirs([str(single), str(real)], library="main")  # os.ReadDir fails: the scan stops
    assert stopped.devices == {} and "stops its scan here" in stopped.problems[0][2]


# N: the library's messages: a name starting with "-" is an invalid name (not a version
# matter), names are sliced in bytes, and requiresV060 splits kind at "/" whatever the vendor.
@pytest.mark.parametrize(
    ("name", "kind", "message"),
    [
        ("-x", "vendor.com/gpu", 'invalid class "-x", should start with a letter or digit'),
        ("aé", "vendor.com/gpu", "invalid character '\ufffd' in device name \"aé\""),
        ("aéb", "vendor.com/gpu", "invalid character 'é' in device name \"aéb\""),
        ("x", "/gpu.mig", "the spec version must be at least v0.6.0"),
    ],
)
def test_n_messages_in_the_librarys_words(name, kind, message):
    text = f'cdiVersion: "0.3.0"\nkind: {kind}\ndevices:\n- name: "{name}"\n  containerEdits: {{env: [A=1]}}\n'
    assert message in rejection(text).message


# Issue 18 item 9: messages quote an excerpt, and nothing of a file reached through a symlink
# out of a dir other users can write.
def test_messages_quote_at_most_an_excerpt():
    secret = "x" * 5000
    message = rejection(one_device(f"{{env: [{secret}]}}")).message
    assert len(message) < 300 and "5,000 characters" in message
    assert len(rejection(("word " * 2000).encode()).message) < 300


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_nothing_is_quoted_from_a_symlink_out_of_a_dir_others_can_write(tmp_path):
    private = write(tmp_path / "home", "history", "secret-token-123\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "x.yaml").symlink_to(private)
    shared.chmod(stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO | stat.S_ISVTX)
    try:
        result = scan_spec_dirs([str(shared)])
    finally:
        shared.chmod(0o700)
    [(severity, path, message)] = result.problems
    assert severity == "error" and path.endswith("x.yaml") and "secret" not in message
    assert "does not say why" in message
    os.chmod(shared, 0o755)  # only we can write it: the reason is given
    assert "secret-token-123" in scan_spec_dirs([str(shared)]).problems[0][2]


# Found by scripts/diff_cdi.py: encoding/json ignores a null for a struct value (and a string,
# number or bool), so a later `containerEdits: null` keeps what `CONTAINEREDITS` set.
def test_a_later_null_keeps_a_value_set_in_another_case():
    text = (
        '{"cdiVersion": "0.3.0", "kind": "v.com/gpu", "devices": [{'
        '"CONTAINEREDITS": {"deviceNodes": [{"path": "/dev/x"}]}, "containerEdits": null, "NAME": "a", "name": null}]}'
    )
    device = parse(text).devices[0]
    assert device.edits.device_nodes[0].path == "/dev/x" and device.name == "a"
    reset = (
        '{"cdiVersion": "0.3.0", "kind": "v.com/gpu", '
        '"devices": [{"name": "gpu0", "containerEdits": {"ENV": ["A=1"], "env": null}}]}'
    )
    assert "empty device edits" in rejection(reset).message  # a slice is set to nil


# Found by scripts/diff_cdi.py: encoding/json decodes a list into the list an earlier key in
# another case set, element by element. cgpu does not model that, and says so.
def test_a_list_set_twice_by_keys_in_different_case_is_declined_with_the_reason():
    text = one_device('{ENV: ["A=1"], env: [null]}')
    error = rejection(text)
    assert not error.by_library and "element by element" in error.message
    assert parse(one_device('{ENV: [], env: ["A=1"]}')).devices[0].edits.env == ("A=1",)
    nested = (
        '{"cdiVersion": "0.3.0", "kind": "v.com/gpu", "devices": [{"name": "foo", '
        '"CONTAINEREDITS": {"env": ["FOO=1"]}, "containerEdits": {"env": [null]}}]}'
    )
    assert "element by element" in rejection(nested).message
    rdt = one_device("{INTELRDT: {closID: x}, intelRdt: {closID: null, memBwSchema: m}}", version="0.7.0")
    assert parse(rdt).devices[0].edits.intel_rdt == {"closID": "x", "memBwSchema": "m"}
