"""Neural-network building blocks: modules, layers and losses.

Everything here speaks ``Tensor`` (and, where an array is built, the backend's
``xp``), so it runs on every device.
"""

from . import functional, init, parallel, utils
from .activations import ELU, Hardtanh, Mish, SiLU, Softplus
from .attention import MultiheadAttention
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .layers import (
    GELU,
    MLP,
    Dropout,
    Flatten,
    Identity,
    LeakyReLU,
    Linear,
    ReLU,
    Sequential,
    Sigmoid,
    Softmax,
    Tanh,
)
from .losses import (
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
    binary_cross_entropy_loss,
    cross_entropy_loss,
    mse_loss,
)
from .module import Module, ModuleDict, ModuleList, Parameter
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell
from .sparse import Embedding
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .upsampling import Upsample

__all__ = [
    "Module", "Parameter", "ModuleList", "ModuleDict", "init", "utils", "parallel", "functional",
    "Linear", "MLP", "Sequential", "Dropout", "Flatten", "LayerNorm", "Embedding", "Conv1d", "Conv2d",
    "ReLU", "Sigmoid", "Tanh", "LeakyReLU", "GELU", "Softmax", "Identity",
    "mse_loss", "cross_entropy_loss", "binary_cross_entropy_loss",
    "BatchNorm1d", "BatchNorm2d", "MultiheadAttention",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d",
    "SiLU", "Softplus", "ELU", "Mish", "Hardtanh", "GroupNorm", "Upsample",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss",
    "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell", "ConvTranspose1d", "ConvTranspose2d",
    "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
]
