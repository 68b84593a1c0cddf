"""The repository local mode's Triton reads: a folder for each model that loads from the repository, none for
a model sent with its files, and nothing of the user's folders ever removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.models import ADD_CONFIG, add_code, python_model
from triton_operator.local.local_access import LocalModeError
from triton_operator.local.served_repository import lay_out
from triton_operator.protocol.desired import DesiredModel


def _from_folder(name: str) -> DesiredModel:
    """A model without files: it loads from its folder in the repository."""
    model = python_model(name, ADD_CONFIG, add_code())
    return DesiredModel(model.name, model.revision, model.serialized_config)


def test_only_models_without_files_are_laid_out_with_their_config_and_links_to_their_folder(tmp_path: Path) -> None:
    folders, root = tmp_path / "models", tmp_path / "served"
    (folders / "from_folder" / "1").mkdir(parents=True)
    (folders / "from_folder" / "config.pbtxt").write_text("the folder's own config, not what loads")
    (folders / "from_folder" / "1" / "model.py").write_text("code")
    (folders / "sent").mkdir()  # the folder's copy of a model sent with its files
    from_folder, sent = _from_folder("from_folder"), python_model("sent", ADD_CONFIG, add_code())

    lay_out(root, [from_folder, sent], folders)
    assert sorted(path.name for path in root.iterdir()) == ["from_folder"]
    assert (root / "from_folder" / "config.pbtxt").read_text() == from_folder.config_pbtxt
    assert (root / "from_folder" / "1").readlink() == folders.absolute() / "from_folder" / "1"
    assert (root / "from_folder" / "1" / "model.py").read_text() == "code"


def test_a_new_entry_is_linked_and_what_is_gone_is_unlinked_without_touching_its_target(tmp_path: Path) -> None:
    folders, root = tmp_path / "models", tmp_path / "served"
    (folders / "model" / "1").mkdir(parents=True)
    lay_out(root, [_from_folder("model"), _from_folder("other")], folders)
    assert (root / "other" / "config.pbtxt").is_file()

    (folders / "model" / "2").mkdir()
    (folders / "model" / "1" / "model.py").write_text("code")
    lay_out(root, [_from_folder("model")], folders)
    assert sorted(path.name for path in (root / "model").iterdir()) == ["1", "2", "config.pbtxt"]
    assert not (root / "other").exists()

    (folders / "model" / "2").rmdir()
    lay_out(root, [_from_folder("model")], folders)
    assert sorted(path.name for path in (root / "model").iterdir()) == ["1", "config.pbtxt"]

    lay_out(root, [], folders)
    assert list(root.iterdir()) == []
    assert (folders / "model" / "1" / "model.py").read_text() == "code"


def test_a_repository_within_the_laid_out_one_is_refused_untouched(tmp_path: Path) -> None:
    root = tmp_path / "work" / "models"
    (root / "model" / "1").mkdir(parents=True)
    (root / "model" / "1" / "model.py").write_text("code")
    with pytest.raises(LocalModeError, match="--model-repository"):
        lay_out(root, [_from_folder("model")], root)
    assert (root / "model" / "1" / "model.py").read_text() == "code"
