"""``clnn.optim``: optimizers whose updates run on the device, and learning-rate schedulers."""

from . import lr_scheduler
from .lr_scheduler import CosineAnnealingLR, LambdaLR, LRScheduler, ReduceLROnPlateau, StepLR
from .optimizers import SGD, Adam, AdamW, Optimizer, RMSprop

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "CosineAnnealingLR",
    "LRScheduler",
    "Optimizer",
    "RMSprop",
    "ReduceLROnPlateau",
    "StepLR",
    "LambdaLR",
    "lr_scheduler",
]
