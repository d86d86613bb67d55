"""Property tests: the reader never raises anything but SpecError, and valid specs survive a
round trip through YAML and JSON."""

from __future__ import annotations

import json
import textwrap

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgpu.cdi import names
from cgpu.cdi.parse import SpecError, parse_spec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SEED = textwrap.dedent("""\
    ---
    cdiVersion: 0.5.0
    kind: nvidia.com/gpu
    containerEdits:
      env: [NVIDIA_VISIBLE_DEVICES=void]
      hooks:
      - {hookName: createContainer, path: /usr/bin/nvidia-cdi-hook, args: [nvidia-cdi-hook, update-ldcache]}
      mounts:
      - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.575.64.03
        containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.575.64.03
        options: [ro, nosuid, nodev, bind]
    devices:
    - name: "0"
      containerEdits:
        deviceNodes:
        - {path: /dev/nvidia0, hostPath: /dev/nvidia0, type: c, major: 195, minor: 0}
    - name: all
      annotations: &a {x: y}
      containerEdits:
        deviceNodes: [{path: /dev/nvidia0}]
    """).encode()


def read(data: bytes) -> None:
    try:
        parse_spec(data, path="/etc/cdi/fuzz.yaml", priority=0)
    except SpecError:
        pass


@SETTINGS
@given(st.binary(max_size=2000))
def test_random_bytes_only_raise_spec_error(data):
    read(data)


@SETTINGS
@given(
    st.text(
        alphabet=st.sampled_from(list("{}[]:,-?&*!|>'\"%@`#\n\t =~.0aykv/\\") + ["\x00", "é", "\u2028"]), max_size=300
    )
)
def test_random_yaml_punctuation_only_raises_spec_error(text):
    read(text.encode("utf-8", "surrogatepass"))


mutation = st.tuples(
    st.integers(0, len(SEED)),
    st.integers(0, 8),
    st.binary(max_size=6)
    | st.sampled_from([b"- ", b": ", b"{", b"[", b"&x ", b"*a", b"\n  ", b"!!int ", b"<<: ", b"~", b"yes", b"---\n"]),
)


@SETTINGS
@given(st.lists(mutation, min_size=1, max_size=6))
def test_mutated_specs_only_raise_spec_error(mutations):
    data = SEED
    for at, cut, insert in mutations:
        data = data[:at] + insert + data[at + cut :]
    read(data)


# Text YAML carries verbatim in a quoted scalar: no control characters (YAML rejects most and
# folds NEL into a space, in JSON strings too), no surrogates, no line or paragraph separators.
yaml_text = st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))
device_names = st.from_regex(names.DEVICE_NAME, fullmatch=True).filter(lambda n: len(n) <= 20)
vendor = st.from_regex(names.VENDOR_OR_CLASS, fullmatch=True).filter(lambda n: 1 < len(n) <= 20)
env = st.tuples(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), st.text(yaml_text, max_size=20)).map(
    "=".join
)
paths = st.text(yaml_text, min_size=1, max_size=30)
node = st.fixed_dictionaries(
    {"path": paths},
    optional={
        "hostPath": paths,
        "type": st.sampled_from(["b", "c", "u", "p"]),
        "major": st.integers(1, 2**40),
        "minor": st.integers(1, 2**40),
        "fileMode": st.integers(0, 2**32 - 1),
        "permissions": st.sampled_from(["r", "rw", "rwm"]),
        "uid": st.integers(0, 2**32 - 1),
        "gid": st.integers(0, 2**32 - 1),
    },
)
mount = st.fixed_dictionaries(
    {"hostPath": paths, "containerPath": paths},
    optional={"type": st.sampled_from(["bind", "tmpfs"]), "options": st.lists(st.text(yaml_text, max_size=8))},
)
hook = st.fixed_dictionaries(
    {"hookName": st.sampled_from(["createContainer", "prestart", "poststop"]), "path": paths},
    optional={
        "args": st.lists(st.text(yaml_text, max_size=8)),
        "env": st.lists(env, max_size=2),
        "timeout": st.integers(1, 100),
    },
)
edits = st.fixed_dictionaries(
    {},
    optional={
        "env": st.lists(env, max_size=3),
        "deviceNodes": st.lists(node, max_size=2),
        "mounts": st.lists(mount, max_size=2),
        "hooks": st.lists(hook, max_size=2),
        "additionalGids": st.lists(st.integers(1, 2**32 - 1), max_size=2),
    },
)
spec_documents = st.fixed_dictionaries(
    {
        "cdiVersion": st.sampled_from(["1.1.0", "v1.0.0", "0.7.0"]),
        "kind": st.tuples(vendor, vendor).map("/".join),
        "devices": st.lists(
            st.tuples(device_names, edits.filter(lambda e: any(e.values()))),
            min_size=1,
            max_size=3,
            unique_by=lambda item: item[0],
        ).map(lambda items: [{"name": name, "containerEdits": body} for name, body in items]),
    },
    optional={
        "containerEdits": edits,
        "annotations": st.dictionaries(st.text(yaml_text, max_size=8), st.text(yaml_text, max_size=8), max_size=2),
    },
)


def expected_edits(raw):
    return (
        tuple(raw.get("env", ())),
        [(n["path"], n.get("hostPath"), n.get("major"), n.get("uid")) for n in raw.get("deviceNodes", ())],
        [
            (m["hostPath"], m["containerPath"], m.get("type"), tuple(m.get("options", ())))
            for m in raw.get("mounts", ())
        ],
        [(h["hookName"], h["path"], tuple(h.get("args", ())), h.get("timeout")) for h in raw.get("hooks", ())],
        tuple(raw.get("additionalGids", ())),
    )


def actual_edits(edits):
    return (
        edits.env,
        [(n.path, n.host_path, n.major, n.uid) for n in edits.device_nodes],
        [(m.host_path, m.container_path, m.type, m.options) for m in edits.mounts],
        [(h.hook_name, h.path, h.args, h.timeout) for h in edits.hooks],
        edits.additional_gids,
    )


@SETTINGS
@given(spec_documents, st.sampled_from(["yaml", "json"]))
def test_valid_specs_round_trip(document, form):
    text = (
        yaml.safe_dump(document, default_style='"', allow_unicode=True)
        if form == "yaml"
        else json.dumps(document, ensure_ascii=False)
    )  # YAML has no UTF-16 surrogate escapes
    spec = parse_spec(text.encode(), path=f"/etc/cdi/x.{form}", priority=0)
    assert spec.version == document["cdiVersion"].removeprefix("v")
    assert spec.kind == document["kind"] and spec.annotations == document.get("annotations", {})
    assert [d.name for d in spec.devices] == [d["name"] for d in document["devices"]]
    for device, raw in zip(spec.devices, document["devices"]):
        assert actual_edits(device.edits) == expected_edits(raw["containerEdits"])
    assert actual_edits(spec.edits) == expected_edits(document.get("containerEdits", {}))


# Issue 25's classes as properties, each against the rule read from the library's source.
ONE_DEVICE = 'cdiVersion: "0.6.0"\nkind: vendor.com/gpu\ndevices:\n- name: gpu0\n  containerEdits: {env: [%s]}\n'


def verdict(text: str) -> str | SpecError:
    try:
        return parse_spec(text.encode(), path="/etc/cdi/x.yaml", priority=0).devices[0].edits.env[-1]
    except SpecError as exc:
        return exc


escapes = st.one_of(
    st.integers(0, 0xFF).map(lambda c: (c, f"\\x{c:02x}")),
    st.integers(0, 0xFFFF).map(lambda c: (c, f"\\u{c:04X}")),
    st.integers(0, 0xFFFFFFFF).map(lambda c: (c, f"\\U{c:08x}")),
    st.integers(0xD800, 0xDFFF).map(lambda c: (c, f"\\u{c:04x}")),
    st.integers(0x10FFFF, 0x110001).map(lambda c: (c, f"\\U{c:08X}")),
)


@SETTINGS
@given(escapes, st.booleans())
def test_an_escape_is_rejected_exactly_where_go_yaml_rejects_it(escape, fallback):
    # go-yaml v2 yaml_parser_scan_flow_scalar: D800-DFFF and above 10FFFF are errors; a `\'`
    # before it makes libyaml fail first, so the go-yaml-flavoured fallback reads the escape
    code, written = escape
    result = verdict(ONE_DEVICE % ((r'"B=it\'s", ' if fallback else "") + f'"A={written}"'))
    if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        assert isinstance(result, SpecError) and "invalid Unicode character escape code" in result.message
    else:
        assert result == "A=" + chr(code)


@SETTINGS
@given(st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True), st.booleans())
def test_a_directive_is_rejected_exactly_where_go_yaml_rejects_it(name, fallback):
    value = {"YAML": " 1.1", "TAG": " !e! tag:example.com,2000:"}.get(name, " x")
    result = verdict(f"%{name}{value}\n---\n" + ONE_DEVICE % (r'"B=it\'s", "A=1"' if fallback else '"A=1"'))
    if name in ("YAML", "TAG"):
        assert result == "A=1"
    else:
        assert isinstance(result, SpecError) and "found unknown directive name" in result.message


@SETTINGS
@given(st.integers(-(2**65), 2**65) | st.integers(2**63 - 2, 2**64 + 1), st.booleans())
def test_an_integer_key_is_rejected_exactly_where_sigs_yaml_rejects_it(key, hexadecimal):
    written = hex(key) if hexadecimal and key >= 0 else str(key)
    text = ONE_DEVICE % '"A=1"' + f"annotations: {{{written}: x}}\n"
    try:
        annotations = parse_spec(text.encode(), path="/etc/cdi/x.yaml", priority=0).annotations
    except SpecError as exc:
        assert 2**63 <= key < 2**64 and "unsupported map key of type: uint64" in exc.message
    else:
        assert not 2**63 <= key < 2**64
        [converted] = annotations
        if -(2**63) <= key < 2**63:
            assert converted == str(key)
        else:  # go-yaml: a float64 where ParseFloat takes it (decimal), else the text (hexadecimal)
            assert converted == written if written.startswith("0x") else "e+" in converted


variants = {"k": "kK\u212a", "i": "iI\u0130\u0131", "n": "nN", "d": "dD", "s": "sS\u017f"}


@SETTINGS
@given(st.data())
def test_a_key_in_another_case_matches_exactly_where_encoding_json_folds_it(data):
    # encoding/json: ASCII case, the Kelvin sign and the long s fold; U+0130 and U+0131 do not
    key = "".join(data.draw(st.sampled_from(variants.get(c, c))) for c in "kind")
    result = verdict(ONE_DEVICE.replace("kind:", f"{key}:") % '"A=1"')
    if "\u0130" in key or "\u0131" in key:
        assert isinstance(result, SpecError) and result.message.startswith("unknown field")
    else:
        assert result == "A=1"


fragments = st.sampled_from(
    [r"\ud83d", r"\U00110000", r"\'", "%FOO x\n", "%YAML 1.1\n", "---\n", '"', "'", ": ", "\n", "{", "}", "[", "]"]
    + [", ", "a", "kind", " ", "\t", "#", "&a ", "*a", "- "]
)


triggers = st.sampled_from(['"\\ud83d"', '"\\U00110000"', '"\\ude00x"', "%FOO x\n---\n", "%yaml 1.1\n"])


def _trigger_in_the_first_document(parts: tuple[list[str], str, list[str]]) -> bool:
    # a directive line after `---` ends that document (libyaml's and go-yaml's parser alike), and
    # go-yaml's Unmarshal reads the first document only, so a trigger after it is not one it meets
    prefix = "".join(parts[0])
    return "---\n" not in prefix or "%" not in prefix[prefix.index("---\n") :]


texts = (
    st.tuples(st.lists(fragments, max_size=15), triggers, st.lists(fragments, max_size=15))
    .filter(_trigger_in_the_first_document)
    .map(lambda parts: "".join(parts[0]) + parts[1] + "".join(parts[2]))
)


@SETTINGS
@given(texts)
def test_the_fallback_never_takes_what_libyaml_rejects_for_a_rule_go_yaml_shares(text):
    # libyaml and go-yaml both reject these two; whatever else made libyaml fail, the YAML the
    # go-yaml-flavoured fallback then reads must still be rejected (by the YAML layer itself)
    from cgpu.cdi import parse

    try:
        yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as exc:
        if any(p in str(exc) for p in ("invalid Unicode character escape code", "found unknown directive name")):
            try:
                parse._first_document(text.encode())
            except parse._Invalid as error:
                assert error.by_library
            else:
                raise AssertionError(f"read {text!r}, which libyaml rejects: {exc}") from None
    except Exception:  # libyaml's binding has raised odd errors on bad input
        pass


def go_json_number(value: float) -> str:
    """encoding/json's floatEncoder text for a float64, written from its source: the shortest
    digits that read back, 'f' format from 1e-6 to below 1e21, 'e' format outside."""
    import decimal

    if value == 0:
        return "-0" if str(value).startswith("-") else "0"
    if not 1e-6 <= abs(value) < 1e21:
        return f"{value:e}"  # an exponent: never an integer for encoding/json
    return format(decimal.Decimal(repr(value)).normalize(), "f")


@SETTINGS
@given(
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**64), 2**65).map(float)
    | st.sampled_from([-0.0, 0.0, -(2.0**63), 2.0**63, 2.0**32 - 1, 2.0**32]),
    st.sampled_from([("major", "int64"), ("minor", "int64"), ("uid", "uint32"), ("fileMode", "uint32")]),
)
def test_a_float_in_an_integer_field_is_read_exactly_where_its_json_text_fits(value, field):
    # N63, NZ: sigs.k8s.io/yaml writes go-yaml's float64 with json.Marshal; encoding/json then
    # reads the field from that text (ParseInt for int64, ParseUint for uint32: no sign at all)
    name, go_type = field
    text = ONE_DEVICE % '"A=1"'
    text = text.replace("env: [", f"deviceNodes: [{{path: /dev/x, {name}: {value!r}}}], env: [")
    written = go_json_number(value)
    low, high = (-(2**63), 2**63 - 1) if go_type == "int64" else (0, 2**32 - 1)
    fits = written.lstrip("-").isdigit() and low <= int(written) <= high
    fits = fits and not (go_type == "uint32" and written.startswith("-"))
    try:
        spec = parse_spec(text.encode(), path="/etc/cdi/x.yaml", priority=0)
    except SpecError as exc:
        assert not fits, exc.message
    else:
        assert fits, written
        node = spec.devices[0].edits.device_nodes[0]
        assert (getattr(node, {"fileMode": "file_mode"}.get(name, name)) or 0) == int(written)


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from("ab"), st.booleans()), min_size=1, max_size=8))
def test_an_anchor_names_its_latest_definition_as_go_yaml_reads_it(steps):
    # AR: each device defines an anchor (&a, &b) or uses one (*a, *b); go-yaml v2 keeps anchors in a
    # map, so an alias names the latest definition before it, and one before any is an error
    lines, defined, expected = [], {}, []
    for index, (anchor, define) in enumerate(steps):
        if define or anchor not in defined:
            defined[anchor] = f"A={index}"
            lines.append(f"- name: d{index}\n  containerEdits: &{anchor} {{env: [A={index}]}}\n")
        else:
            lines.append(f"- name: d{index}\n  containerEdits: *{anchor}\n")
        expected.append((defined[anchor],))
    text = 'cdiVersion: "0.3.0"\nkind: vendor.com/gpu\ndevices:\n' + "".join(lines)
    spec = parse_spec(text.encode(), path="/etc/cdi/x.yaml", priority=0)
    assert [device.edits.env for device in spec.devices] == expected
