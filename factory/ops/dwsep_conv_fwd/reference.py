"""The numpy reference of the fused depthwise-separable forward, in float64 on logical (N, C, *S) arrays."""

from __future__ import annotations

import itertools
from typing import Mapping

import numpy as np

from .problem import Activation, DwsepProblem


def activate(values: np.ndarray, act: Activation) -> np.ndarray:
    if act is Activation.RELU:
        return np.maximum(values, 0.0)
    if act is Activation.RELU6:
        return np.clip(values, 0.0, 6.0)
    return values


def depthwise(problem: DwsepProblem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(N, C, *input) x (C, *filter) -> (N, C, *output): one filter per channel, zero padding."""
    pads = [(0, 0), (0, 0)] + [(p, p) for p in problem.pad]
    padded = np.pad(x, pads)
    out = np.zeros((problem.N, problem.C, *problem.output), dtype=np.float64)
    for tap in itertools.product(*(range(f) for f in problem.filter)):
        window = tuple(slice(t * dil, t * dil + (o - 1) * s + 1, s)
                       for t, dil, o, s in zip(tap, problem.dilation, problem.output, problem.stride))
        scale = w[(slice(None), *tap)].reshape((1, problem.C) + (1,) * problem.ndim)
        out += padded[(slice(None), slice(None), *window)] * scale
    return out


def forward_logical(problem: DwsepProblem, x: np.ndarray, w_dw: np.ndarray, w_pw: np.ndarray,
                    b_dw: np.ndarray | None, b_pw: np.ndarray | None, *, activations: bool = True) -> np.ndarray:
    """(N, K, *output) from logical float64 arrays; `activations=False` leaves both activations out (the
    magnitude bound of the verifier, which passes absolute values)."""
    broadcast = (1,) * problem.ndim
    mid = depthwise(problem, x, w_dw)
    if b_dw is not None:
        mid = mid + b_dw.reshape((1, problem.C) + broadcast)
    if activations:
        mid = activate(mid, problem.act_dw)
    out = np.einsum("nc...,kc->nk...", mid, w_pw)
    if b_pw is not None:
        out = out + b_pw.reshape((1, problem.K) + broadcast)
    return activate(out, problem.act_pw) if activations else out


def to_logical(problem: DwsepProblem, array: np.ndarray) -> np.ndarray:
    """A physical activation as (N, channels, *S)."""
    if problem.channels_last:
        return np.moveaxis(array, -1, 1)
    return array


def from_logical(problem: DwsepProblem, array: np.ndarray) -> np.ndarray:
    if problem.channels_last:
        return np.ascontiguousarray(np.moveaxis(array, 1, -1))
    return np.ascontiguousarray(array)


def forward(problem: DwsepProblem, inputs: Mapping[str, np.ndarray], *, magnitude: bool = False) -> np.ndarray:
    """The physical output from float64 physical inputs (their absolute values when `magnitude`)."""
    take = (lambda a: np.abs(a)) if magnitude else (lambda a: a)
    x = to_logical(problem, take(inputs["input"]))
    b_dw = take(inputs["bias_dw"]) if problem.bias_dw else None
    b_pw = take(inputs["bias_pw"]) if problem.bias_pw else None
    out = forward_logical(problem, x, take(inputs["weight_dw"]), take(inputs["weight_pw"]), b_dw, b_pw,
                          activations=not magnitude)
    return from_logical(problem, out)
