"""The NCCL guide's environment-variable list, fact-checked (chapter 5).

"The NCCL guide" is the NCCL deep dive ("NCCL 심층 분석") of the book's companion guide to NeMo on
Kubernetes.

``GUIDE_NCCL_SCRIPT`` is the book's "NCCL 환경 변수 완벽 가이드" export block, verbatim.
``fact_check_exports(script)`` parses any such block and returns one row per variable with its
status (exists / exists, debug only / deprecated / obsolete / does not exist / PyTorch's / not NCCL's)
and the fact, checked against NCCL's documentation and source at :data:`FACTS_SOURCE` on the day
:data:`FACTS_CHECKED` and PyTorch's ProcessGroupNCCL. The rows, their source and that date live in
``labsupport/stack.toml`` (``[[nccl_variable]]``), with the other stack facts that go stale: the next
review edits that file and re-runs chapter 5.
"exists, debug only" is NCCL's own split: ``docs/userguide/source/env.rst`` lists the variable under
"Debugging" ("should generally not be set for production code"), not under "System configuration".
``nccl_environment()`` reports the NCCL version
of this torch build and the NCCL-related variables set in this process.
"""
from __future__ import annotations

import os
import re
from datetime import date
from typing import Mapping

from labsupport.stack_facts import load_nccl_variables

__all__ = ["GUIDE_NCCL_SCRIPT", "NCCL_ENV_FACTS", "FACTS_SOURCE", "FACTS_CHECKED", "fact_check_exports",
           "nccl_environment", "STATUSES"]

GUIDE_NCCL_SCRIPT = """\
# NCCL 환경 변수 완벽 가이드

# 1. 알고리즘 선택
export NCCL_ALGO=Ring           # Ring (기본), Tree, CollNet
export NCCL_ALGO_ALL=Ring       # AllReduce 알고리즘 지정
export NCCL_ALGO_TREE=Tree      # Tree 알고리즘 강제

# 2. 프로토콜 선택
export NCCL_PROTO=Simple        # Simple (기본) 또는 LL (Low Latency)

# 3. 채널 설정 (매우 중요)
export NCCL_MIN_NCHANNELS=4     # 최소 채널 수 (기본 4)
export NCCL_MAX_NCHANNELS=8     # 최대 채널 수 (기본 32)

# 4. 버퍼 크기
export NCCL_BUFFSIZE=2097152    # 기본 2MB, 1MB-4MB 권장

# 5. 디버그 설정
export NCCL_DEBUG=INFO          # TRACE, DEBUG, INFO, WARN
export NCCL_DEBUG_FILE=/var/log/nccl-debug.txt
export NCCL_DEBUG_SUBSYS=ALL    # 모든 서브시스템 추적

# 6. 네트워크 인터페이스
export NCCL_SOCKET_IFNAME=eth0  # 사용할 네트워크 인터페이스
export NCCL_IB_DISABLE=0        # InfiniBand 사용

# 7. EFA 설정 (AWS)
export FI_PROVIDER=efa
export FI_EFA_USE_DEVICE_RDMA=1
export FI_EFA_FORK_SAFE=1

# 8. 커널 최적화
export NCCL_CHECKS_DISABLE=0    # 안전 검사 활성화 (프로덕션)
export NCCL_COMM_BLOCKING_WAIT=0
export NCCL_ASYNC_ERROR_HANDLING=1

# 9. P2P 설정
export NCCL_P2P_DISABLE=0       # GPU P2P 통신 활성화
export NCCL_P2P_LEVEL=SYS       # P2P 레벨: LOC (로컬), SYS (시스템)

# 10. 타임아웃 설정
export NCCL_COMM_WAIT_TIMEOUT=0 # 0 = 무한 대기
"""

STATUSES = ("exists", "exists, debug only", "deprecated", "obsolete", "does not exist", "PyTorch's", "not NCCL's")

_TABLE = load_nccl_variables(statuses=STATUSES)
#: variable → (status, fact), from labsupport/stack.toml.  "debug only": NCCL's docs say not to set it in
#: production scripts.
NCCL_ENV_FACTS: dict[str, tuple[str, str]] = _TABLE.facts
#: where :data:`NCCL_ENV_FACTS` was read, and when (labsupport/stack.toml's [nccl_variables])
FACTS_SOURCE: str = _TABLE.source
FACTS_CHECKED: date = _TABLE.checked

_EXPORT = re.compile(r"^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*(?:#\s*(.*))?$")


def fact_check_exports(script: str, facts: Mapping[str, tuple[str, str]] | None = None) -> list[dict[str, str]]:
    """One row per ``export NAME=value  # comment`` line of ``script``, in order.

    Row keys: ``line`` (1-based), ``variable``, ``value``, ``guide_says`` (the comment),
    ``status`` (one of :data:`STATUSES`) and ``fact``.  Variables outside the table: ``FI_*``
    are libfabric's (AWS EFA, read by the aws-ofi-nccl plugin), others are reported as unchecked.
    """
    facts = NCCL_ENV_FACTS if facts is None else facts
    rows = []
    for lineno, line in enumerate(script.splitlines(), start=1):
        m = _EXPORT.match(line)
        if not m:
            continue
        name, value, comment = m.group(1), m.group(2), (m.group(3) or "").strip()
        if name in facts:
            status, fact = facts[name]
        elif name.startswith("FI_"):
            status = "not NCCL's"
            fact = "libfabric (AWS EFA provider), read through the aws-ofi-nccl plugin; not checked here"
        else:
            status, fact = "unchecked", "not in this fact table"
        rows.append({"line": str(lineno), "variable": name, "value": value, "guide_says": comment,
                     "status": status, "fact": fact})
    return rows


def nccl_environment(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """``{"nccl_version": "2.x.y" or None, "variables": {name: value}}`` for this process.

    nccl_version is None when this torch build has no NCCL (CPU wheels).  variables are the set
    ``NCCL_*``, ``TORCH_NCCL_*`` and ``FI_*`` environment variables, sorted by name.
    """
    environ = os.environ if environ is None else environ
    version = None
    try:
        import torch  # noqa: PLC0415 - torch only when called (start-up time of the importing command)

        if torch.cuda.is_available() or hasattr(torch._C, "_nccl_version"):
            v = torch.cuda.nccl.version()
            version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001 - CPU builds have no NCCL
        version = None
    names = sorted(k for k in environ if k.startswith(("NCCL_", "TORCH_NCCL_", "FI_")))
    return {"nccl_version": version, "variables": {k: environ[k] for k in names}}
