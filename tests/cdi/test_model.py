"""The parsed-spec value objects behave as frozen dataclasses did (they are plain classes, for
start-up time): equality by class and fields, the fields' tuple hash, the repr, no assignment."""

from __future__ import annotations

import pytest

from cgpu.cdi.model import ContainerEdits, DeviceNode, Mount, ResolvedDevice, ScanResult, Spec, SpecDevice


def test_equal_fields_are_equal_and_hash_alike_and_other_classes_never_equal() -> None:
    one, two = DeviceNode("/dev/nvidia0", major=195), DeviceNode(path="/dev/nvidia0", major=195)
    assert one == two and hash(one) == hash(two) == hash(
        ("/dev/nvidia0", None, None, 195, None, None, None, None, None)
    )
    assert one != DeviceNode("/dev/nvidia1") and len({one, two}) == 1
    assert Mount("/a", "/b") != ("/a", "/b", None, ())  # not a tuple
    assert SpecDevice("a", ContainerEdits()) != ResolvedDevice(
        "a", Spec("p", "0.6.0", "x/y", ()), SpecDevice("a", ContainerEdits())
    )


def test_fields_cannot_be_assigned_and_replace_copies() -> None:
    node = DeviceNode("/dev/dri/card0")
    with pytest.raises(AttributeError):
        node.path = "/dev/other"
    with pytest.raises(AttributeError):
        del node.path
    assert node.replace(host_path="/x") == DeviceNode("/dev/dri/card0", host_path="/x") and node.host_path is None
    spec = Spec("p", "0.6.0", "x/y", ())
    assert spec.replace(priority=2).priority == 2 and spec.priority == 0


def test_repr_and_defaults_as_the_dataclasses_had_them() -> None:
    assert (
        repr(Mount("/a", "/b", options=("ro",)))
        == "Mount(host_path='/a', container_path='/b', type=None, options=('ro',))"
    )
    spec = Spec("p", "0.6.0", "nvidia.com/gpu", ())
    assert spec.edits == ContainerEdits() and spec.annotations == {} and spec.warnings == ()
    assert (spec.vendor, spec.device_class) == ("nvidia.com", "gpu")
    assert SpecDevice("a", ContainerEdits()).annotations is not SpecDevice("b", ContainerEdits()).annotations


def test_copies_and_pickles_are_equal() -> None:
    import copy
    import pickle

    spec = Spec("p", "0.6.0", "x/y", (SpecDevice("a", ContainerEdits(device_nodes=(DeviceNode("/dev/x"),))),))
    assert copy.deepcopy(spec) == spec == pickle.loads(pickle.dumps(spec)) and copy.copy(spec) == spec


def test_an_edits_object_holding_a_dict_is_unhashable() -> None:
    # the disk cache stores such edits apiece instead of sharing them
    with pytest.raises(TypeError):
        hash(ContainerEdits(intel_rdt={"closID": "x"}))


def test_scan_result_is_mutable_and_unhashable() -> None:
    result = ScanResult(devices={}, specs=[], problems=[])
    result.problems.append(("warning", "p", "m"))
    result.stopped_at = "/etc/cdi"
    assert result == ScanResult({}, [], [("warning", "p", "m")], stopped_at="/etc/cdi") and result.unreached == {}
    with pytest.raises(TypeError):
        hash(result)
