"""parse_spec: every reading rule of the reference library, accepted and rejected."""

from __future__ import annotations

import json

import pytest

from cgpu.cdi import goyaml
from cgpu.cdi.parse import MAX_SPEC_BYTES, SpecError, parse_spec, resolve_plain

from .conftest import ALL_FIELDS, minimal, parse, rejection


def device_spec(
    edits: str, *, version: str = "0.3.0", kind: str = "example.com/gpu", name: str = "gpu0", extra: str = ""
) -> str:
    """A spec with one device whose containerEdits body is `edits` (YAML, 4-space indented)."""
    return f'cdiVersion: "{version}"\nkind: {kind}\n{extra}devices:\n- name: "{name}"\n  containerEdits:\n{edits}'


# --- accepted specs -------------------------------------------------------------------------


def test_minimal_spec_fields():
    spec = parse(minimal(names=("gpu0", "gpu1")), path="/etc/cdi/a.yaml")
    assert (spec.path, spec.version, spec.kind, spec.vendor, spec.device_class) == (
        "/etc/cdi/a.yaml",
        "0.3.0",
        "example.com/gpu",
        "example.com",
        "gpu",
    )
    assert [device.name for device in spec.devices] == ["gpu0", "gpu1"]
    assert spec.devices[0].edits.env == ("A=1",)
    assert spec.warnings == ()


def test_json_is_read_as_yaml_with_comments():
    text = "# header comment\n" + json.dumps(
        {
            "cdiVersion": "0.3.0",
            "kind": "vendor.com/device",
            "devices": [{"name": "myDevice", "containerEdits": {"deviceNodes": [{"path": "/dev/card1"}]}}],
        }
    )
    spec = parse_spec(text.encode(), path="/etc/cdi/x.json", priority=3)
    assert spec.priority == 3 and spec.devices[0].edits.device_nodes[0].path == "/dev/card1"


@pytest.mark.parametrize(
    "version", ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0", "v0.5.0", "v1.1.0"]
)
def test_every_known_version_is_accepted(version):
    assert parse(minimal(version=version)).version == version.removeprefix("v")


def test_all_fields_are_read():
    spec = parse(ALL_FIELDS)
    node = spec.devices[0].edits.device_nodes[0]
    assert (
        node.path,
        node.host_path,
        node.type,
        node.major,
        node.minor,
        node.file_mode,
        node.permissions,
        node.uid,
        node.gid,
    ) == ("/dev/card1", "/vendor/card1", "c", 226, 1, 432, "rw", 0, 44)
    hook = spec.edits.hooks[0]
    assert (hook.hook_name, hook.path, hook.args, hook.env, hook.timeout) == (
        "createContainer",
        "/bin/hook",
        ("hook", "x"),
        ("H=1",),
        5,
    )
    mount = spec.edits.mounts[0]
    assert (mount.host_path, mount.container_path, mount.type, mount.options) == (
        "tmpfs",
        "/tmp/data",
        "tmpfs",
        ("nosuid", "size=1k"),
    )
    assert spec.edits.intel_rdt == {
        "closID": "clos",
        "l3CacheSchema": "L3:0=f",
        "memBwSchema": "MB:0=50",
        "schemata": ["x"],
        "enableMonitoring": True,
    }
    assert spec.edits.net_devices == ({"hostInterfaceName": "eth1", "name": "net0"},)
    assert spec.edits.additional_gids == (44, 0)
    assert spec.annotations == {"a": "b"} and spec.devices[0].annotations == {"k": "v"}


def test_only_the_first_document_counts():
    spec = parse(minimal() + "---\nthis: [is not even valid\n")
    assert spec.kind == "example.com/gpu"


def test_additional_gid_zero_only_is_a_valid_device():
    spec = parse(device_spec("    additionalGids: [0]\n", version="0.7.0"))
    assert spec.devices[0].edits.additional_gids == (0,)


def test_benign_aliases_are_expanded():
    spec = parse("""
        cdiVersion: 0.3.0
        kind: example.com/gpu
        devices:
        - name: a
          containerEdits: &edits
            env: [A=1]
        - name: b
          containerEdits: *edits
        """)
    assert spec.devices[1].edits.env == ("A=1",)


# --- YAML 1.1 scalars where the target is a string (sigs.k8s.io/yaml) -------------------------


@pytest.mark.parametrize(
    ("written", "name"),
    [
        ("0", "0"),
        ("'0'", "0"),
        ("yes", "true"),
        ("y", "true"),
        ("off", "false"),
        ("1:0", "1:0"),
        ("010", "8"),
        ("0x1F", "31"),
        ("1_000", "1000"),
        ("1.50", "1.5"),
        ("1.0", "1"),
        ("09", "9"),
        ("2001-12-14", "2001-12-14"),
        ("!!str 010", "010"),
        ("'yes'", "yes"),
    ],
)
def test_scalars_become_strings_like_the_library(written, name):
    assert (
        parse(device_spec("    env: [A=1]\n", version="0.5.0", name="x").replace('"x"', written)).devices[0].name
        == name
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("~", None),
        ("", None),
        ("Null", None),
        ("true", True),
        ("NO", False),
        ("12", 12),
        ("-0b101", -5),
        ("0o17", 15),
        ("+12", 12),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("abc", "abc"),
        ("1.5.3", "1.5.3"),
        ("18446744073709551615", 2**64 - 1),
        ("+18446744073709551615", 1.8446744073709552e19),
    ],
)
def test_resolve_plain_like_go_yaml_v2(text, value):
    assert resolve_plain(text) == value and type(resolve_plain(text)) is type(value)


def test_numbers_in_env_and_annotations_become_strings():
    annotations = "annotations: {num: 1, b: yes, f: 0.5, e: 12345678.0, x: .nan, n: 1}\n"
    spec = parse(device_spec("    env: [A=1]\n", version="0.6.0", extra=annotations))
    # the key n is the YAML 1.1 boolean false, stringified as "false"
    assert spec.annotations == {"num": "1", "b": "true", "f": "0.5", "e": "1.2345678e+07", "x": "NaN", "false": "1"}


def test_float_with_integer_value_fits_an_integer_field():
    spec = parse(device_spec("    deviceNodes: [{path: /dev/x, type: c, major: 2.0, minor: 1}]\n"))
    assert spec.devices[0].edits.device_nodes[0].major == 2


# --- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize("written", ['"1.2.0"', '"0.0.0"', '""', '"0.5"', "0.5", '"V0.5.0"'])
def test_unknown_versions_are_invalid(written):
    message = rejection(minimal().replace('"0.3.0"', written))
    assert message.startswith("invalid version ")
    assert {"0.5": '"0.5"', '""': '""'}.get(written, written.replace("V", "V")) in message


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_pre_release_versions_need_0_3_0(version):
    assert rejection(minimal(version=version)) == (
        f"the spec version must be at least v0.3.0 (0.3.0 is the earliest version the CDI library accepts) "
        f"but declares {version}"
    )


@pytest.mark.parametrize(
    ("text", "required", "reason"),
    [
        (device_spec("    mounts: [{hostPath: /a, containerPath: /a, type: bind}]\n"), "0.4.0", "mounts[].type"),
        (device_spec("    deviceNodes: [{path: /dev/x, hostPath: /dev/x}]\n"), "0.5.0", "deviceNodes[].hostPath"),
        (device_spec("    env: [A=1]\n", name="0"), "0.5.0", 'device name "0", which starts with a digit'),
        (device_spec("    env: [A=1]\n", extra="annotations: {a: b}\n"), "0.6.0", "annotations"),
        (
            device_spec("    env: [A=1]\n", kind="nvidia.com/gpu.coherent"),
            "0.6.0",
            'a dot in the class of kind "nvidia.com/gpu.coherent"',
        ),
        (device_spec("    intelRdt: {closID: x}\n"), "0.7.0", "intelRdt"),
        (device_spec("    additionalGids: [44]\n"), "0.7.0", "additionalGids"),
        (device_spec("    netDevices: [{hostInterfaceName: eth0, name: n0}]\n"), "1.1.0", "netDevices"),
        (device_spec("    intelRdt: {schemata: []}\n"), "1.1.0", "intelRdt.schemata or intelRdt.enableMonitoring"),
        (
            device_spec("    intelRdt: {enableMonitoring: true}\n"),
            "1.1.0",
            "intelRdt.schemata or intelRdt.enableMonitoring",
        ),
    ],
)
def test_minimum_version_implied_by_fields(text, required, reason):
    assert rejection(text) == f"the spec version must be at least v{required} (it uses {reason}) but declares 0.3.0"
    assert parse(text.replace('"0.3.0"', f'"{required}"')).version == required


def test_minimum_version_cases_of_the_reference():  # cdi.md §8 case 15
    assert rejection(device_spec("    env: [A=1]\n", version="0.4.0", name="0")).startswith(
        "the spec version must be at least v0.5.0"
    )
    assert rejection(device_spec("    env: [A=1]\n", version="0.5.0", kind="nvidia.com/gpu.coherent")).startswith(
        "the spec version must be at least v0.6.0"
    )


def test_empty_annotations_and_null_intel_rdt_need_no_newer_version():
    spec = parse(device_spec("    intelRdt: ~\n    env: [A=1]\n", extra="annotations: {}\n"))
    assert spec.version == "0.3.0" and spec.devices[0].edits.intel_rdt is None


# --- strict fields, case-insensitive keys, duplicate keys -------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (minimal() + "foo: bar\n", 'unknown field "foo" at the top level'),
        (
            device_spec("    intelRdt: {closID: x, enableCMT: true}\n", version="1.0.0"),
            'unknown field "enableCMT" in devices[0].containerEdits.intelRdt',
        ),
        (
            device_spec("    deviceNodes: [{path: /dev/x, hostPaths: /dev/x}]\n"),
            'unknown field "hostPaths" in devices[0].containerEdits.deviceNodes[0]',
        ),
        (device_spec("    env: [A=1]\n") + "  extra: 1\n", 'unknown field "extra" in devices[0]'),
        (minimal() + "1: x\n", 'unknown field "1" at the top level'),
    ],
)
def test_unknown_fields_reject_the_file(text, message):
    assert rejection(text) == message


def test_case_variant_keys_are_accepted_with_a_warning():
    spec = parse(
        device_spec(
            "    deviceNodes: [{path: /dev/x, hostpath: /dev/y}]\n    additionalGIDs: [44]\n", version="0.7.0"
        ).replace("kind:", "KIND:")
    )
    assert spec.kind == "example.com/gpu"
    assert spec.devices[0].edits.device_nodes[0].host_path == "/dev/y"
    assert spec.devices[0].edits.additional_gids == (44,)
    assert (
        len(spec.warnings) == 1
        and "devices[0].containerEdits.deviceNodes[0].hostpath (for hostPath)" in spec.warnings[0]
        and "KIND (for kind)" in spec.warnings[0]
    )


def test_non_ascii_key_folding_follows_go():
    # U+017F (long s) folds to S in encoding/json; U+FB01 (fi ligature) does not fold to "fi"
    assert parse(minimal().replace("kind:", "\u017find:".replace("\u017f", "k").replace("k", "\u212a", 1))).kind
    assert rejection(device_spec("    deviceNodes: [{path: /dev/x, \ufb01leMode: 1}]\n")).startswith("unknown field")


def test_two_keys_for_one_field_the_later_in_byte_order_wins():
    # json.Marshal sorts keys: "Kind" < "kind", so "kind" is decoded last and wins
    spec = parse(
        "cdiVersion: 0.3.0\nkind: example.com/lower\nKind: example.com/upper\n"
        "devices: [{name: a, containerEdits: {env: [A=1]}}]\n"
    )
    assert spec.kind == "example.com/lower"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (minimal() + "kind: example.com/other\n", 'line 7: key "kind" is already set on line 2'),
        (device_spec("    env: [A=1]\n    env: [B=1]\n"), 'line 7: key "env" is already set on line 6'),
        (
            device_spec("    env: [A=1]\n", extra="annotations: {a: b, a: c}\n", version="0.6.0"),
            'key "a" is already set',
        ),
    ],
)
def test_duplicate_keys_reject_the_file(text, message):
    assert message in rejection(text)


# --- types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (minimal().replace("kind: example.com/gpu", "kind: [a]"), "kind: expected a string, found a list"),
        (
            device_spec('    deviceNodes: [{path: /dev/x, major: "226"}]\n'),
            'devices[0].containerEdits.deviceNodes[0].major: expected an integer (int64), found the string "226"',
        ),
        (
            device_spec("    deviceNodes: [{path: /dev/x, uid: -1}]\n"),
            "devices[0].containerEdits.deviceNodes[0].uid: -1 does not fit a uint32",
        ),
        (
            device_spec("    deviceNodes: [{path: /dev/x, major: 1.5}]\n"),
            "devices[0].containerEdits.deviceNodes[0].major: expected an integer (int64), found the number 1.5",
        ),
        (device_spec("    deviceNodes: [{path: /dev/x, major: .inf}]\n"), "cannot be written as JSON"),
        (device_spec("    intelRdt: {enableMonitoring: 1}\n", version="1.1.0"), "expected true or false"),
        (device_spec("    env: A=1\n"), 'devices[0].containerEdits.env: expected a list, found the string "A=1"'),
        (minimal().replace("devices:\n", "devices: {}\n", 1).split("- name")[0], "devices: expected a list"),
        (
            device_spec("    env: [A=1]\n", extra="annotations: {a: [1]}\n", version="0.6.0"),
            "annotations.a: expected a string, found a list",
        ),
        ("- a\n- b\n", "the document: expected a mapping, found a list"),
        ("just text\n", 'the document: expected a mapping, found the string "just text"'),
        (device_spec("    env: [A=1]\n") + "x: !!int abc\n", 'cannot decode "abc" as a !!int'),
    ],
)
def test_type_errors(text, message):
    assert message in rejection(text)


# --- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("nvidia", 'invalid vendor. empty name (kind "nvidia" must be vendor/class)'),
        ("nvidia.com/gpu/extra", "invalid class. invalid character '/' in name \"gpu/extra\""),
        ("-nvidia.com/gpu", 'invalid vendor. "-nvidia.com", should start with letter'),
    ],
)
def test_bad_kinds_reject_the_file(kind, message):
    assert message in rejection(minimal(kind=kind))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a b", 'failed add device "a b": invalid character \' \' in device name "a b"'),
        ("x:", 'failed add device "x:": invalid name "x:", should end with a letter or digit'),
        ("../../etc", 'failed add device "../../etc": invalid class "../../etc", should start with a letter or digit'),
        ("", 'failed add device "": invalid (empty) device name'),
    ],
)
def test_bad_device_names_reject_the_file(name, message):
    assert rejection(minimal(names=(name,), version="0.5.0")) == message


@pytest.mark.parametrize("kind", ["a/gpu", "nvidia.com/g"])
def test_one_character_vendor_or_class_crashes_v110_and_is_read_on_main(kind):  # cdi.md §8 case 30
    with pytest.raises(SpecError) as caught:
        parse(minimal(kind=kind))
    assert caught.value.crash and "panics" in caught.value.message
    spec = parse_spec(minimal(kind=kind).encode(), path="/etc/cdi/x.yaml", library="main")
    assert spec.kind == kind
    assert spec.warnings and "crashes engines whose CDI library is <= 1.1.0" in spec.warnings[0]


# --- containerEdits and devices ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ("    env: [NOEQUALS]\n", 'invalid container edits: invalid environment variable "NOEQUALS"'),
        ("    env: [=x]\n", 'invalid container edits: invalid environment variable "=x"'),
        ("    deviceNodes: [{path: ''}]\n", "invalid (empty) device path"),
        ("    deviceNodes: [{path: /dev/x, type: z}]\n", 'device "/dev/x": invalid type "z"'),
        ("    deviceNodes: [{path: /dev/x, permissions: rwx}]\n", 'device "/dev/x": invalid permissions "rwx"'),
        ("    hooks: [{hookName: onStart, path: /bin/x}]\n", 'invalid hook name "onStart"'),
        ("    hooks: [{hookName: createContainer, path: ''}]\n", 'invalid hook "createContainer" with empty path'),
        (
            "    hooks: [{hookName: poststop, path: /x, env: [BAD]}]\n",
            'invalid hook "poststop": invalid environment variable "BAD"',
        ),
        ("    mounts: [{hostPath: '', containerPath: /x}]\n", "invalid mount, empty host path"),
        ("    mounts: [{hostPath: /x, containerPath: ''}]\n", "invalid mount, empty container path"),
        ("    intelRdt: {closID: ..}\n", "invalid ClosID"),
        ("    intelRdt: {closID: a/b}\n", "invalid ClosID"),
    ],
)
def test_invalid_device_edits(edits, message):
    version = "0.7.0" if "intelRdt" in edits else "0.3.0"
    assert (
        rejection(device_spec(edits, version=version)) == f'failed add device "gpu0": invalid device "gpu0": {message}'
    )


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ("    netDevices: [{hostInterfaceName: '', name: n}]\n", "invalid linux net device, empty HostInterfaceName"),
        ("    netDevices: [{hostInterfaceName: e, name: ''}]\n", "invalid linux net device, empty Name"),
        (
            "    netDevices: [{hostInterfaceName: e, name: a}, {hostInterfaceName: e, name: b}]\n",
            'invalid linux net device, duplicate HostInterfaceName "e" with names "b" and "a"',
        ),
        (
            "    netDevices: [{hostInterfaceName: e, name: a}, {hostInterfaceName: f, name: a}]\n",
            'invalid linux net device, duplicate Name "a" with HostInterfaceName "f" and "e"',
        ),
    ],
)
def test_invalid_net_devices(edits, message):
    assert message in rejection(device_spec(edits, version="1.1.0"))


@pytest.mark.parametrize(
    "edits",
    [
        "    deviceNodes: [{path: /dev/x, permissions: rrw}]\n",
        "    deviceNodes: [{path: dev/relative, type: p}]\n",
        "    env: ['A B=1', 'LD_PRELOAD=/x.so']\n",
        "    mounts: [{hostPath: /, containerPath: ../../etc}]\n",
        "    hooks: [{hookName: prestart, path: sh, args: [sh, -c, x]}]\n",
    ],
)
def test_edits_the_library_accepts(edits):
    assert parse(device_spec(edits)).devices[0].name == "gpu0"


def test_closid_slash_means_the_root_clos():
    assert parse(device_spec("    intelRdt: {closID: /}\n", version="0.7.0")).devices[0].edits.intel_rdt == {
        "closID": "/"
    }


def test_spec_level_edits_are_validated():
    assert rejection(minimal() + "containerEdits:\n  env: [BAD]\n") == (
        'spec-level containerEdits: invalid container edits: invalid environment variable "BAD"'
    )


@pytest.mark.parametrize("edits", ["  containerEdits: {}\n", "  containerEdits: ~\n", ""])
def test_empty_device_edits_reject_the_file(edits):  # cdi.md §8 case 21
    text = f"cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices:\n- name: gpu0\n{edits}"
    assert rejection(text) == 'failed add device "gpu0": invalid device, empty device edits'


def test_spec_level_edits_may_be_empty():
    assert parse(minimal() + "containerEdits: {}\n").edits.is_empty()


def test_duplicate_device_name_rejects_the_file():  # case 19
    assert rejection(minimal(names=("0", "0"), version="0.5.0")) == 'invalid spec, multiple device "0"'


@pytest.mark.parametrize(
    ("text", "message"),
    [  # case 20
        ("", "no Spec data (the file is empty or holds only null)"),
        ("# only a comment\n", "no Spec data (the file is empty or holds only null)"),
        ("null\n", "no Spec data (the file is empty or holds only null)"),
        ("{}", 'invalid version ""'),
        ("cdiVersion: 0.3.0\nkind: example.com/gpu\ndevices: []\n", "invalid spec, no devices"),
        ("cdiVersion: 0.3.0\nkind: example.com/gpu\n", "invalid spec, no devices"),
    ],
)
def test_empty_specs(text, message):
    assert rejection(text).startswith(message)


# --- bad input guards -------------------------------------------------------------------------


def test_size_cap():
    data = minimal().encode() + b"#" * MAX_SPEC_BYTES
    with pytest.raises(SpecError) as caught:
        parse_spec(data, path="/etc/cdi/huge.yaml", priority=0)
    assert "cgpu reads spec files up to 4 MiB" in caught.value.message and not caught.value.by_library


def test_alias_bomb_stops_fast():
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    with pytest.raises(SpecError) as caught:
        parse_spec(("\n".join(lines) + "\n" + minimal()).encode(), path="/x.yaml", priority=0)
    assert "document contains excessive aliasing" in caught.value.message and caught.value.by_library


@pytest.mark.parametrize(
    "text", ["[" * 5000 + "]" * 5000, "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 1500)), "x: " + "{a: " * 2000]
)
def test_deep_nesting_is_a_spec_error(text):
    assert "not valid YAML" in rejection(text.encode())


def test_deep_nesting_without_libyaml(monkeypatch):
    import yaml

    goyaml.loader_class.cache_clear()
    monkeypatch.delattr(yaml, "CSafeLoader")
    try:
        assert "nested too deeply" in rejection(("[" * 5000 + "]" * 5000).encode())
        assert parse(minimal()).kind == "example.com/gpu"
    finally:
        monkeypatch.undo()
        goyaml.loader_class.cache_clear()


@pytest.mark.parametrize("data", [b"kind: caf\xe9\n", b"\xff\xfe\xfd"])
def test_undecodable_bytes(data):
    message = rejection(data)
    assert message.startswith(("not UTF-8", "not valid YAML"))


def test_control_character_is_named_as_such():
    assert rejection(b"cdiVersion: \x00\n").startswith("a control character (U+0000) at offset 12")


def test_utf16_with_bom_is_read_like_go_yaml():
    assert parse_spec(minimal().encode("utf-16"), path="/x.yaml", priority=0).kind == "example.com/gpu"


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: {c: *a}}\n"])
def test_recursive_alias(text):
    assert rejection(text) == "line 1: a YAML anchor's value contains an alias to itself"


@pytest.mark.parametrize("text", ["x: *nope\n", "a: b: c\n", "key: 'open\n", "? [a]\n: b\n", "~: x\n", "<<: {a: 1}\n"])
def test_malformed_yaml(text):
    assert rejection(text)


def test_garbage_collection_is_restored_after_a_parse():
    import gc

    assert gc.isenabled()
    parse(minimal())
    rejection("kind: [")
    assert gc.isenabled()


# --- the reader's last three classes (AR, N63, NZ): minimal files ---------------------------------


def test_an_anchor_defined_again_names_the_later_node():
    text = device_spec("    &e {env: [A=1]}\n", name="a") + "- name: b\n  containerEdits: &e {env: [B=1]}\n"
    text += "- name: c\n  containerEdits: *e\n"
    assert [d.edits.env for d in parse(text).devices] == [("A=1",), ("B=1",), ("B=1",)]


@pytest.mark.parametrize(
    ("node", "says"),
    [
        ("major: -9223372036854775809", "major: -9223372036854776000 does not fit a int64"),
        ("uid: -0.0", "uid: -0 does not fit a uint32"),
        ("gid: -0.0", "gid: -0 does not fit a uint32"),
        ("fileMode: -0.0", "fileMode: -0 does not fit a uint32"),
        ("major: 1.5", "major: expected an integer (int64), found the number 1.5"),
    ],
)
def test_a_float_is_read_through_the_json_text_the_library_makes_of_it(node, says):
    assert says in rejection(device_spec(f"    deviceNodes: [{{path: /dev/x, {node}}}]\n"))


@pytest.mark.parametrize(("node", "value"), [("major: -9223372036854775808", -(2**63)), ("major: 2.0", 2)])
def test_an_integer_field_takes_what_its_json_text_fits(node, value):
    assert (
        parse(device_spec(f"    deviceNodes: [{{path: /dev/x, {node}}}]\n")).devices[0].edits.device_nodes[0].major
        == value
    )
