"""The parallel-layout mistakes chapter 0's q1 (the data-parallel size) and chapter 6's q2 (the
global-batch arithmetic of a config) both name, defined once: a layout TP × PP does not divide
accepted, a legal layout refused (TP across nodes, or a wrong divisor), DP from one node's GPUs
or divided by TP alone.  Each chapter's table uses these rules, a variant via :meth:`Rule.but`
where its question asks for something else (chapter 6 has no warning, and checks the batch too).

The texts are filled from :func:`layout_facts` (plus the chapter's own facts: ``call``, ``got``).
"""
from __future__ import annotations

from typing import Any

from labsupport.check._core import short
from labsupport.check.rules import Rule


def many(n: Any, what: str) -> str:
    """``n`` and ``what``, plural unless n is 1: '1 replica', '4 GPUs'."""
    return f"{short(n)} {what}" + ("" if n == 1 else "s")


def layout_facts(devices: int, nodes: int, tp: int, pp: int, upper: bool) -> dict[str, Any]:
    """The numbers a layout mistake is explained with; ``upper``: the chapter writes TP × PP, else tp × pp."""
    world = devices * nodes
    return {"devices": devices, "nodes": nodes, "tp": tp, "pp": pp, "world": world, "tp_pp": tp * pp,
            "world_gpus": many(world, "GPU"), "devices_gpus": many(devices, "GPU"),
            "tp_x_pp": "TP × PP" if upper else "tp × pp", "tp_name": "TP" if upper else "tp",
            "pp_is": f"{'PP' if upper else 'pp'} = {pp}"}


ACCEPTS_INDIVISIBLE = Rule(
    "accepts_indivisible",
    symptom="{call} returned {got}, but {world_gpus} cannot be cut into whole replicas of {tp_x_pp} = {tp_pp} GPUs",
    ask="What should your function do with a layout whose GPUs do not split into whole model replicas?",
    fix="Test (devices × num_nodes) % ({tp_x_pp}) and raise ValueError when it is not 0.")

REFUSES_TP_ACROSS_NODES = Rule(
    "refuses_tp_across_nodes",
    symptom="{call} raised ValueError({error}); {tp_x_pp} = {tp_pp} divides the {world} GPUs — only TP = {tp} is "
            "wider than one node of {devices_gpus}",
    ask="Is a TP group that spans nodes impossible, or only slow? What does the exercise say about it?",
    fix="Do not raise when tp > devices: return the data-parallel size and call warnings.warn(...) once.")

RAISES_LEGAL_LAYOUT = Rule(
    "raises_legal_layout",
    symptom="{call} raised ValueError({error}), but {tp_x_pp} = {tp_pp} divides the {world_gpus}{also_divides}",
    ask="Work out your raise condition by hand for this layout: which number must {tp_x_pp} divide?",
    fix="Raise only when (devices × num_nodes) % ({tp_x_pp}) != 0 — all the GPUs of all nodes.")

ONE_NODE_ONLY = Rule(
    "one_node_only",
    symptom="{call} returned {got}: {replicas} × {tp_x_pp} = {need}, but the job has {world}",
    ask="How many GPUs does the job have in all, over its {nodes} nodes?",
    fix="Count the GPUs of every node: the world is devices × num_nodes GPUs, not one node's devices; "
        "DP = world // ({tp_x_pp}).")

DIVIDES_BY_TP_ONLY = Rule(
    "divides_by_tp_only",
    symptom=ONE_NODE_ONLY.symptom,
    ask="How many GPUs does ONE model replica take when it is also cut into {pp_is} pipeline stages?",
    fix="One replica takes {tp_x_pp} GPUs: divide the world by {tp_x_pp}, not by {tp_name} alone.")
