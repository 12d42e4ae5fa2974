"""``clnn.signal``: 1-D and 2-D cross-correlation and convolution with ``scipy.signal``'s semantics.

``correlate(in1, in2, mode)`` and ``convolve(in1, in2, mode)`` match ``scipy.signal.correlate`` and
``scipy.signal.convolve``; both are differentiable in both inputs. They live with the other ops in
``clnn/ops/signal.py``; this module is their public name.
"""

from .ops.signal import convolve, correlate, correlation_lags

__all__ = ["correlate", "convolve", "correlation_lags"]
