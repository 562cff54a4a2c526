"""Evaluation datasets: one ``Example`` type, loaders for each benchmark, first-N or seeded selection."""

from quco.datasets.base import KINDS, DatasetError, Example, select
from quco.datasets.generic import load_generic
from quco.datasets.multihop import load_2wikimultihopqa, load_hotpotqa, load_musique
from quco.datasets.registry import DATASETS, DatasetRef, load_dataset, resolve_dataset
from quco.datasets.yesno import load_pubmedqa, load_strategyqa

__all__ = [
    "DATASETS",
    "KINDS",
    "DatasetError",
    "DatasetRef",
    "Example",
    "load_2wikimultihopqa",
    "load_dataset",
    "load_generic",
    "load_hotpotqa",
    "load_musique",
    "load_pubmedqa",
    "load_strategyqa",
    "resolve_dataset",
    "select",
]
