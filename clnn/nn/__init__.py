"""``clnn.nn``: modules and layers with PyTorch's interface, plus Keras-style training on every module.

Example:
    >>> from clnn import nn
    >>> model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
    ...                       nn.Linear(16 * 4 * 4, 10))
    >>> model.compile(optimizer="adam", loss="cross_entropy", metrics=["accuracy"])
"""

from __future__ import annotations

from . import utils
from .callbacks import Callback, EarlyStopping, History, LearningRateScheduler, ModelCheckpoint
from .containers import ModuleDict, ModuleList
from .data_parallel import DataParallel
from .layers import (
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Dropout,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    MaxPool2d,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .losses import BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss
from .module import Module, Parameter, Sequential
from .parallel import DistributedDataParallel
from .rnn import GRU, LSTM
from .saving import load
from .sparse import Embedding
from .transformer import (
    MultiheadAttention,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "GELU", "AdaptiveAvgPool2d", "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Callback", "Conv1d", "Conv2d",
    "ConvTranspose2d", "DataParallel", "DistributedDataParallel", "Dropout", "EarlyStopping", "Embedding", "Flatten",
    "History", "GRU", "Identity", "LSTM", "LayerNorm", "ModuleDict", "ModuleList",
    "BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss", "NLLLoss", "SmoothL1Loss", "HuberLoss",
    "LearningRateScheduler", "LeakyReLU", "Linear", "MaxPool2d", "ModelCheckpoint", "Module", "Parameter", "ReLU",
    "Sequential", "SiLU", "Sigmoid", "Softmax", "Tanh", "load", "utils",
    "MultiheadAttention", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer",
]
