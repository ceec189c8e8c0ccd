"""What the tests share: where the models are, and small builders."""

from __future__ import annotations

from pathlib import Path

SHARED_MODELS = Path(__file__).resolve().parents[1].parent / "shared" / "models"
PROJECT_MODELS = Path(__file__).resolve().parents[1] / "models"


def shared_model(name: str) -> Path:
    path = SHARED_MODELS / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the tests need ../shared/models beside the project"
        )
    return path
