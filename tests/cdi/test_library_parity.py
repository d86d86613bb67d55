"""Where cgpu once disagreed with the CDI library engines vendor (v1.1.0), one test per class of
disagreement (A, K, G, H, I, B2, C, E, M, N, S, W, G2, U, KI), and the messages' limits on quoting
a file."""

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


# S: go-yaml v2 (scannerc.go yaml_parser_scan_flow_scalar) rejects a \x, \u or \U escape of a
# surrogate (D800-DFFF) or above 10FFFF in a double-quoted scalar, in YAML and in JSON (read as
# YAML); Python's json.dumps writes non-BMP characters as exactly such pairs. libyaml rejects them
# too, and the go-yaml-flavoured fallback loader (used when libyaml fails, e.g. on `\'`) must not
# take them either.
SURROGATE_ESCAPES = [r"\ud83d\ude00", r"\ud83d", r"\ude00", r"\uD800", r"\U0000DFFF", r"\U00110000", r"\UFFFFFFFF"]


@pytest.mark.parametrize("escape", SURROGATE_ESCAPES)
@pytest.mark.parametrize("form", ["yaml", "json", "yaml with \\'", "key"])
def test_s_a_surrogate_or_out_of_range_escape_rejects_the_file(escape, form):
    if form == "json":
        text = (
            '{"cdiVersion": "0.3.0", "kind": "vendor.com/gpu", "devices": [{"name": "gpu0", '
            f'"containerEdits": {{"env": ["A={escape}"]}}}}]}}'
        )
    elif form == "key":
        text = minimal(version="0.6.0") + f'annotations: {{"k{escape}": v}}\n'
    else:
        first = r'"B=it\'s", ' if "with" in form else ""  # libyaml fails there: the fallback reads on
        text = one_device(f'{{env: [{first}"A={escape}"]}}')
    error = rejection(text)
    assert error.by_library and not error.crash
    assert "found invalid Unicode character escape code" in error.message


def test_s_the_fallback_loader_alone_rejects_them(monkeypatch):
    # libyaml rejects the escape itself; the file the fallback reads after a `\'` must fail as well
    text = one_device(r'{env: ["B=it\'s", "A=\ud83d\ude00"]}')
    assert "invalid Unicode character escape" in rejection(text).message
    from cgpu.cdi import goyaml

    goyaml.loader_class.cache_clear()
    monkeypatch.delattr(yaml, "CSafeLoader")  # no libyaml: the pure-Python loader reads everything
    try:
        assert "invalid Unicode character escape" in rejection(one_device(r'{env: ["A=\ud83d"]}')).message
        assert "unknown directive" in rejection("%FOO bar\n---\n" + minimal()).message
    finally:
        monkeypatch.undo()
        goyaml.loader_class.cache_clear()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (r'"A=\U0010FFFF"', "A=\U0010ffff"),  # the last code point
        (r'"A=\uFFFF"', "A=\uffff"),  # a noncharacter: go-yaml takes it
        (r'"A=\uD7FF\uE000"', "A=\ud7ff\ue000"),  # around the surrogates
        (r"'A=\ud83d'", r"A=\ud83d"),  # no escapes in single quotes
        (r"A=\ud83d", r"A=\ud83d"),  # nor in plain scalars
        ('"A=\U0001f600"', "A=\U0001f600"),  # the character itself
    ],
)
def test_s_escapes_go_yaml_takes(value, expected):
    assert parse(one_device(f"{{env: [{value}]}}")).devices[0].edits.env == (expected,)


# G2: go-yaml v2 knows the directives %YAML and %TAG only (yaml_parser_scan_directive: "found
# unknown directive name"); its names are [0-9A-Za-z_-]. libyaml rejects them too, PyYAML ignores
# them; and a version number has at most two digits (max_number_length).
@pytest.mark.parametrize("directive", ["%FOO bar", "%yaml 1.1", "%YAMLX 1.1", "%Tag ! tag:x,2000:", "%FOO"])
@pytest.mark.parametrize("fallback", [False, True])
def test_g2_an_unknown_directive_rejects_the_file(directive, fallback):
    body = one_device(r'{env: ["A=it\'s"]}') if fallback else minimal()
    error = rejection(f"{directive}\n---\n{body}")
    assert error.by_library and "found unknown directive name" in error.message


@pytest.mark.parametrize("directive", ["%YAML 1.001", "%YAML 100.1"])
def test_g2_a_long_version_number_rejects_the_file(directive):
    assert "found extremely long version number" in rejection(f"{directive}\n---\n{minimal()}").message


@pytest.mark.parametrize("directive", ["%YAML 1.1", "%YAML 01.01", "%YAML\t1.1", "%TAG !e! tag:example.com,2000:"])
@pytest.mark.parametrize("fallback", [False, True])
def test_g2_directives_go_yaml_takes(directive, fallback):
    body = one_device(r'{env: ["A=it\'s"]}') if fallback else minimal()
    assert parse(f"{directive}\n---\n{body}").devices[0].name in ("gpu0",)


# U: go-yaml v2 resolves an integer from 2^63 to 2^64-1 to a uint64, and sigs.k8s.io/yaml's
# convertToJSONableObject turns only string, int, int64, float64 and bool keys into JSON keys.
@pytest.mark.parametrize(
    "key",
    [
        "9223372036854775808",
        "18446744073709551615",
        "0xFFFFFFFFFFFFFFFF",
        "1_0000000000000000000",
        "!!int 9223372036854775808",
    ],
)
def test_u_a_uint64_map_key_rejects_the_file(key):
    error = rejection(minimal(version="0.6.0") + f"annotations: {{{key}: x}}\n")
    assert error.by_library and "unsupported map key of type: uint64" in error.message
    # anywhere in the document, before the fields are matched: also under an unknown field
    assert "uint64" in rejection(minimal() + f"x:\n  {key}: y\n").message


@pytest.mark.parametrize(
    ("key", "json_key"),
    [
        ("9223372036854775807", "9223372036854775807"),  # int64
        ("-9223372036854775808", "-9223372036854775808"),
        ("18446744073709551616", "1.8446744e+19"),  # above uint64: a float64 key
        ("-9223372036854775809", "-9.223372e+18"),
        ('"18446744073709551615"', "18446744073709551615"),  # a string
    ],
)
def test_u_keys_the_library_converts(key, json_key):
    assert parse(minimal(version="0.6.0") + f"annotations: {{{key}: x}}\n").annotations == {json_key: "x"}


# KI: encoding/json folds a key's runes to the smallest of their unicode.SimpleFold orbit, and Go's
# caseOrbit maps U+0130 (dotted I) and U+0131 (dotless i) to themselves: they match no ASCII field, so such a key
# is an unknown field. Only the long s and the Kelvin sign fold onto ASCII letters.
@pytest.mark.parametrize(
    ("text", "field"),
    [
        (minimal().replace("kind:", "KİND:"), "KİND"),
        (minimal().replace("kind:", "kınd:"), "kınd"),
        (minimal().replace("devices:", "devİces:"), "devİces"),
        (one_device("{deviceNodes: [{path: /dev/x, permıssıons: rw}]}"), "permıssıons"),
    ],
)
def test_ki_dotted_and_dotless_i_are_unknown_fields(text, field):
    error = rejection(text)
    assert error.by_library and error.message.startswith(f'unknown field "{field}"')


def test_ki_the_long_s_and_the_kelvin_sign_fold():
    spec = parse(minimal().replace("kind:", "\u212aind:").replace("devices:", "device\u017f:"))
    assert spec.kind == "example.com/gpu" and "\u212aind (for kind)" in spec.warnings[0]


# W: filepath.Walk calls the scan's function with a failed lstat of the spec dir; it returns every
# error but "not found" (ENOENT), and pkg/cdi/spec-dirs.go scanSpecDirs returns it, leaving its
# loop over the dirs (refresh ignores the error): no later, higher-priority dir is read.
def _failing_dir(tmp_path, how):
    if how == "ENOTDIR":  # a path through a regular file
        write(tmp_path, "file", "x")
        return tmp_path / "file" / "cdi"
    if how == "ELOOP":  # a path through a symlink loop
        (tmp_path / "loop").symlink_to("loop")
        return tmp_path / "loop" / "cdi"
    return tmp_path / ("x" * 300)  # ENAMETOOLONG: a name over 255 bytes


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX errors")
@pytest.mark.parametrize("how", ["ENOTDIR", "ELOOP", "ENAMETOOLONG"])
@pytest.mark.parametrize("library", ["v1.1.0", "main"])
def test_w_a_spec_dir_whose_lstat_fails_ends_the_scan(tmp_path, how, library):
    first, last = tmp_path / "first", tmp_path / "last"
    write(first, "a.yaml", minimal(kind="example.com/first"))
    write(last, "b.yaml", minimal(kind="example.com/last"))
    bad = _failing_dir(tmp_path, how)
    result = scan_spec_dirs([str(first), str(bad), str(last)], library=library)
    assert list(result.devices) == ["example.com/first=gpu0"]
    assert result.stopped_at == str(bad) and list(result.unreached) == ["example.com/last=gpu0"]
    assert result.unreached["example.com/last=gpu0"].path == str(last / "b.yaml")
    assert result.unreadable == []  # the engine fails the same way: nothing unknown
    [(severity, source, message)] = result.problems
    assert severity == "warning" and source == str(bad)
    assert f"({how})" in message and "does not exist" not in message
    assert f"reads no later spec dir ({last})" in message and "example.com/last=gpu0" in message


def test_w_a_failing_last_dir_loses_nothing_and_a_missing_dir_ends_nothing(tmp_path):
    first, last = tmp_path / "first", tmp_path / "last"
    write(first, "a.yaml", minimal(kind="example.com/first"))
    write(last, "b.yaml", minimal(kind="example.com/last"))
    bad = _failing_dir(tmp_path, "ENOTDIR")
    result = scan_spec_dirs([str(first), str(bad)])
    assert list(result.devices) == ["example.com/first=gpu0"] and result.unreached == {}
    assert "would read no later spec dir anyway" in result.problems[0][2]
    missing = scan_spec_dirs([str(first), str(tmp_path / "nope" / "cdi"), str(last)])
    assert sorted(missing.devices) == ["example.com/first=gpu0", "example.com/last=gpu0"] and not missing.problems


@pytest.mark.skipif(sys.platform != "linux", reason="PATH_MAX of Linux")
def test_w_an_entry_whose_lstat_fails_ends_the_scan_after_the_entries_before_it(tmp_path):
    # Walk lstats every entry, whatever its name; an entry whose full path is over PATH_MAX fails
    # (ENAMETOOLONG) though the dir itself lists fine
    fd = os.open(tmp_path, os.O_RDONLY)
    deep = tmp_path
    try:
        while len(str(deep)) < 4000:  # the dir's path stays under 4,096 bytes, its entry's not
            name = "d" * min(240, 4000 - len(str(deep)) - 1) or "d"
            os.mkdir(name, dir_fd=fd)
            deep = deep / name
            fd, old = os.open(name, os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
        with os.fdopen(os.open("0.yaml", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "w") as handle:
            handle.write(minimal(kind="example.com/early"))
        os.close(os.open("a" * 250, os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))  # not even a spec name
        with os.fdopen(os.open("b.yaml", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd), "w") as handle:
            handle.write(minimal(kind="example.com/late"))
    finally:
        os.close(fd)
    last = tmp_path / "last"
    write(last, "c.yaml", minimal(kind="example.com/last"))
    result = scan_spec_dirs([str(deep), str(last)])
    assert list(result.devices) == ["example.com/early=gpu0"] and list(result.unreached) == ["example.com/last=gpu0"]
    [(severity, source, message)] = result.problems
    assert severity == "warning" and source == str(deep / ("a" * 250)) and "(ENAMETOOLONG)" in message
    assert "reads no later file of this dir and no later spec dir" in message


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root user to deny a search")
def test_w_a_dir_under_a_parent_the_user_cannot_search(tmp_path):
    first, locked, last = tmp_path / "first", tmp_path / "locked", tmp_path / "last"
    write(first, "a.yaml", minimal(kind="example.com/first"))
    write(locked / "cdi", "x.yaml", minimal(kind="example.com/locked"))
    write(last, "b.yaml", minimal(kind="example.com/last"))
    locked.chmod(0o600)  # readable, not searchable: lstat of locked/cdi fails with EACCES
    try:
        result = scan_spec_dirs([str(first), str(locked / "cdi"), str(last)])
    finally:
        locked.chmod(0o700)
    assert list(result.devices) == ["example.com/first=gpu0"] and list(result.unreached) == ["example.com/last=gpu0"]
    assert result.unreadable == [str(locked / "cdi")]  # root would read it: unknown, not absent
    assert "(EACCES)" in result.problems[0][2] and "an engine running as root is not refused" in result.problems[0][2]


# Q: go-yaml v2's yaml_parser_scan_plain_scalar ends a plain scalar at "?" inside [] or {} (and the
# "?" then starts a key the collection does not take); libyaml >= 0.2.5 keeps it in the scalar.
@pytest.mark.parametrize("edits", ["{env: [URL=http://x?a=1]}", "{env: [A=1?]}", "{env: [A=1, B=a ? b]}"])
def test_q_a_question_mark_in_a_flow_plain_scalar_rejects_the_file(edits):
    error = rejection(one_device(edits))
    assert error.by_library and "expected ',' or ']'" in error.message


@pytest.mark.parametrize(
    ("text", "env"),
    [
        (one_device('{env: ["URL=http://x?a=1"]}'), "URL=http://x?a=1"),  # quoted
        (one_device("{env: [A=1]}") + "x-note: what?\n", None),  # outside the flow collection: an unknown field
        (
            '{\n\t"cdiVersion": "0.3.0",\n\t"kind": "vendor.com/gpu",\n\t"devices": [{"name": "gpu0",\n'
            '\t\t"containerEdits": {"env": ["URL=http://x?a=1"]}}]\n}\n',
            "URL=http://x?a=1",
        ),  # tab-indented JSON: go-yaml's scanner takes a tab as a blank in flow context
        (
            'cdiVersion: "0.3.0"\nkind: vendor.com/gpu\ndevices:\n- name: gpu0\n  containerEdits:\n'
            "    env:\n    - URL=http://x?a=1\n    deviceNodes: [{path: /dev/x}]\n",
            "URL=http://x?a=1",
        ),
    ],
)
def test_q_question_marks_go_yaml_takes(text, env):
    if env is None:
        assert rejection(text).message.startswith('unknown field "x-note"')
    else:
        assert parse(text).devices[0].edits.env == (env,)


def test_the_fallback_takes_tabs_where_go_yaml_does():
    # libyaml fails at \' (go-yaml has that escape), so the fallback reads the tabs after , and :
    text = one_device('{env: ["A=it\\\'s",\t"B=1"],\tdeviceNodes:\t[{path:\t/dev/x}]}')
    assert parse(text).devices[0].edits.env == ("A=it's", "B=1")
    assert "violates indentation" in rejection("kind: a\n  b\n\tc\n" + minimal()).message


# AR: go-yaml v2 decode.go (*parser).anchor keeps anchors in a map, so a name defined again (each
# device with its own `containerEdits: &e {...}`, as a template copying a block writes it) names
# the later node from there on; libyaml's and PyYAML's composers reject "found duplicate anchor".
def test_ar_an_anchor_defined_twice_is_read_the_later_one_winning():
    text = (
        'cdiVersion: "0.3.0"\nkind: vendor.com/gpu\ndevices:\n'
        "- name: gpu0\n  containerEdits: &e {env: [A=0]}\n"
        "- name: gpu1\n  containerEdits: *e\n"  # before the second definition: the first
        "- name: gpu2\n  containerEdits: &e {env: [A=2]}\n"
        "- name: gpu3\n  containerEdits: *e\n"  # after it: the second
    )
    envs = [(device.name, device.edits.env) for device in parse(text).devices]
    assert envs == [("gpu0", ("A=0",)), ("gpu1", ("A=0",)), ("gpu2", ("A=2",)), ("gpu3", ("A=2",))]


@pytest.mark.parametrize(
    ("text", "says"),
    [  # neighbours: what the library still rejects around a redefined anchor
        (one_device("&e {env: [A=1]}") + "x: &e 1\ny: *f\n", "found undefined alias"),
        (one_device("&e {env: [A=1]}") + "x: &e 1\n", 'unknown field "x"'),
        (one_device("*e") + "x: &e {env: [A=1]}\n", "found undefined alias"),  # an alias before any definition
    ],
)
def test_ar_neighbours(text, says):
    error = rejection(text)
    assert says in error.message and error.by_library and "duplicate anchor" not in error.message


def test_ar_a_redefined_anchor_in_a_scan(tmp_path):
    etc = tmp_path / "etc"
    text = (
        'cdiVersion: "0.3.0"\nkind: vendor.com/gpu\ndevices:\n'
        "- name: gpu0\n  containerEdits: &e {env: [A=0]}\n- name: gpu1\n  containerEdits: &e {env: [A=1]}\n"
    )
    write(etc, "a.yaml", text)
    result = scan_spec_dirs([str(etc)])
    assert sorted(result.devices) == ["vendor.com/gpu=gpu0", "vendor.com/gpu=gpu1"] and result.problems == []


# N63 and NZ: go-yaml v2 resolves a number beyond int64 and uint64, or any float, to a float64;
# sigs.k8s.io/yaml (v1.4.0, yaml.go yamlToJSON) hands it to json.Marshal, which writes the float's
# shortest digits ('f' format), and encoding/json reads the field back from that text: ParseInt for
# int64, ParseUint (no sign, "-0" neither) for uint32.
@pytest.mark.parametrize(
    ("field", "value", "text", "go_type"),
    [
        ("major", "-9223372036854775809", "-9223372036854776000", "int64"),  # N63: the float is -2^63
        ("minor", "-9223372036854775808.0", "-9223372036854776000", "int64"),
        ("major", "9223372036854775807.0", "9223372036854776000", "int64"),  # 2^63 as a float
        ("uid", "-0.0", "-0", "uint32"),  # NZ
        ("gid", "-0.0", "-0", "uint32"),
        ("fileMode", "-.0", "-0", "uint32"),
        ("uid", "-0e5", "-0", "uint32"),
    ],
)
def test_n63_nz_a_float_goes_through_its_json_text(field, value, text, go_type):
    error = rejection(one_device(f"{{deviceNodes: [{{path: /dev/x, {field}: {value}}}]}}"))
    assert error.by_library and not error.crash
    assert f"deviceNodes[0].{field}: {text} does not fit a {go_type}" in error.message


def test_nz_additional_gids_take_no_negative_zero():
    error = rejection(one_device("{additionalGids: [5, -0.0]}", version="0.7.0"))
    assert "additionalGids[1]: -0 does not fit a uint32" in error.message


@pytest.mark.parametrize(
    ("field", "value", "read"),
    [  # neighbours the library reads
        ("major", "-9223372036854775808", -(2**63)),  # an int64: no float on the way
        ("major", "-0.0", 0),  # ParseInt takes "-0"
        ("uid", "-0", 0),  # an integer: go-yaml resolves "-0" to the int 0
        ("uid", "0.0", 0),
        ("uid", "4294967295.0", 2**32 - 1),
        ("major", "1e3", 1000),
        ("major", "9.2e18", 9_200_000_000_000_000_000),
    ],
)
def test_n63_nz_neighbours_the_library_reads(field, value, read):
    node = parse(one_device(f"{{deviceNodes: [{{path: /dev/x, {field}: {value}}}]}}")).devices[0].edits.device_nodes[0]
    assert (getattr(node, {"fileMode": "file_mode"}.get(field, field)) or 0) == read


# The null-entry panic with a 1.1.0 feature: requiredVersion stops at requiresV110, so Go's map
# order decides whether requiresV050 runs; but the validation dereferences the same entry, so the
# library panics in every run (30 of 30 measured) unless an error comes first.
def test_c_a_null_device_node_beside_net_devices_panics_in_every_run():
    text = one_device("{deviceNodes: [~], netDevices: [{hostInterfaceName: eth0, name: n0}]}", version="1.1.0")
    error = rejection(text)
    assert error.crash and "some runs" not in error.message and "(*DeviceNode).Validate" in error.message


def test_c_only_an_earlier_error_makes_the_version_walks_panic_one_of_some_runs():
    text = one_device("{env: [BAD], deviceNodes: [~], netDevices: [{hostInterfaceName: eth0, name: n0}]}", "1.1.0")
    error = rejection(text)
    assert error.crash and "requiresV050" in error.message
    assert "in some runs only: Go's map order decides; the other runs reject the file: " in error.message
    assert "invalid environment variable" in error.message
