"""Files an engine skips in a spec dir, and a spec dir with no spec, are named for a person (info)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _infos(run_cli, folder: Path) -> list[dict[str, str]]:
    code, out, err = run_cli("probe", "--engine", "none", "--spec-dir", str(folder), "--root", str(folder), "--json")
    assert code == 0, err
    return [p for p in json.loads(out)["problems"] if p["severity"] == "info"]


def test_yml_backup_and_hidden_files_are_named_as_skipped(run_cli, tmp_path):
    shutil.copy(REPO / "cdi-samples/lavapipe/spec/software.yaml", tmp_path / "software.yaml")
    for name in ("nvidia.yml", "amd.JSON", "software.yaml~", "nvidia.yaml.rpmsave", ".hidden", "README"):
        (tmp_path / name).write_text("not read")
    messages = {p["message"] for p in _infos(run_cli, tmp_path)}
    assert messages == {
        "skipped amd.JSON, nvidia.yml: engines read only *.json and *.yaml (case-sensitive): rename to use them",
        "skipped nvidia.yaml.rpmsave, software.yaml~: backup or editor files: engines skip them, and so does cgpu",
        "skipped .hidden: hidden files that are not *.json or *.yaml: engines skip them, and so does cgpu",
        "skipped README: not *.json or *.yaml: engines skip them, and so does cgpu",
    }


def test_an_empty_spec_dir_is_explained(run_cli, tmp_path):
    (infos,) = [_infos(run_cli, tmp_path)]
    assert [p["source"] for p in infos] == [str(tmp_path)]
    assert (
        "holds no *.json or *.yaml spec, so it defines no device: generate one with `nvidia-ctk" in infos[0]["message"]
    )


def test_a_spec_dir_of_specs_only_gets_no_hint(run_cli):
    assert _infos(run_cli, REPO / "cdi-samples/lavapipe/spec") == []


def test_a_spec_dir_behind_the_roots_absolute_link_is_looked_at_inside_the_root(run_cli, tmp_path):
    """Debian's var/run -> /run: the hint is about the root's /run/cdi, never this machine's."""
    root = tmp_path / "node"
    (root / "run/cdi").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var/run").symlink_to("/run")
    (root / "run/cdi/nvidia.yml").write_text("not read")
    code, out, err = run_cli("probe", "--engine", "none", "--root", str(root), "--json")
    assert code == 0, err
    hints = [p for p in json.loads(out)["problems"] if p["kind"] == "skipped-file"]
    assert [(p["source"], p["message"].split(":")[0]) for p in hints] == [
        (str(root / "var/run/cdi"), "skipped nvidia.yml")
    ]
