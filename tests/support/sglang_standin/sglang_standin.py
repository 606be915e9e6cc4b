#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SGLANG TEST STAND-IN -- this is NOT SGLang and serves no model.

Used by the sglang_service Molecule scenario on hosts without a GPU, in place
of ``python -m sglang.launch_server`` (role variable
``sglang_service_launcher``, test-only). Run it with the interpreter of a
CPU-only SGLang parse venv (scripts/sglang-parse-venv.sh):

    VENV/bin/python sglang_standin.py --model-path ... --port 30123 ...

What is real: the argv is parsed by SGLang's OWN parser from the installed
``sglang`` package (``sglang.srt.server_args.prepare_server_args``); a bad
argv exits 2 with SGLang's own error, exactly like the real launcher.
What is fake: everything after parsing. It serves, from what it parsed,

* ``GET /health``, ``/health_generate`` -- 503 while "warming up", then 200
* ``GET /server_info`` -- every parsed server arg as a top-level key (as
  SGLang does), ``version``, ``launch_command``, and ``"standin": true``
* ``GET /v1/models`` -- ``data[0].id`` = served model name
* ``POST /generate`` -- a fixed text, ``meta_info.standin = true``
* ``POST /v1/chat/completions`` -- an OpenAI-shaped ``chat.completion`` with a
  fixed assistant message (``model`` = the request's model; 404 for another model
  name, like SGLang's served-model check)

API key: read exactly as SGLang reads it -- ``--api-key`` or a ``--config`` YAML
(``api-key: ...``) merged by SGLang's own ``prepare_server_args``. When set,
every path except ``/health*``, ``/ready*`` and ``/metrics*`` needs
``Authorization: Bearer KEY`` and answers 401 ``{"error": "Unauthorized"}``
otherwise (SGLang 0.5.23 ``srt/utils/auth.py``). Like SGLang 0.5.23,
``/server_info`` reports every server arg, the key included, to an
authenticated caller: never print that answer unfiltered.

Drafter: for a speculative instance ``internal_states[0].avg_spec_accept_length``
(SGLang 0.5.23 ``scheduler_components/internal_state.py``) is absent until the first
completion ("verify step"), then reports the behaviour's accept_length (below; plant 1.0
to test a drafter that accepts nothing); ``/generate`` reports the same
``meta_info.spec_accept_length`` and ``spec_verify_ct``.

Behaviour from the model (``load_behaviour``): a ``standin.json`` in the drafter's directory
(``--speculative-draft-model-path``; for a non-speculative instance the model's directory,
``--model-path``), read once at start, so a bad release in a test is a Hub commit of the
drafter, as in the field, with no test switch in the product::

    {"accept_length": 3.5, "decode_tok_s": 40.0, "never_ready": false,
     "fail_rate": 0.0, "crash_on_start": false}

``accept_length`` is what ``avg_spec_accept_length`` reports; ``decode_tok_s``: each
completion generates ``max_tokens`` tokens (default 16) and takes tokens / decode_tok_s
seconds, so a client's measured throughput matches it; ``never_ready``: /health* answers
503 forever; ``fail_rate``: that share of completions answers 500 (deterministic: the
n-th completion fails when floor(n * rate) grows); ``crash_on_start``: exit 1 after
parsing. ``hosts``: {hostname: {key: value}} overrides for one host (a release that fails on
one machine only, e.g. the middle host of a rollout). A missing key takes its default; CT200_STANDIN_ACCEPT_LENGTH stays a fallback
for accept_length when no standin.json names it.

Metrics: ``GET /metrics`` is Prometheus text with SGLang 0.5.23's own metric names and label
sets (``srt/observability/metrics_collector.py``; tests/sglang/test_standin_metrics.py compares
them with that source): the scheduler's gauges (``sglang:spec_accept_length``, ``sglang:gen_throughput``,
``sglang:num_queue_reqs``, ``sglang:token_usage`` ...) and the tokenizer's counters and
``sglang:time_to_first_token_seconds`` histogram. Their values follow the behaviour of
``standin.json`` (``load_behaviour``): accept_length, decode_tok_s, and the optional metrics keys
queue_reqs (default 0), token_usage (default 0.05) and ttft_s (default 0.05).

Environment knobs: CT200_STANDIN_LOAD_SECONDS (port stays closed, like a
weight load; default 2), CT200_STANDIN_WARMUP_SECONDS (503 phase; default 1),
CT200_STANDIN_ACCEPT_LENGTH (above), CT200_STANDIN_COMPLETION_SECONDS (each chat completion takes
this long; default 0), CT200_STANDIN_ANSWER (``content`` default;
``reasoning``: the text in ``reasoning_content`` and ``content`` null, as Kimi's
reasoning parser does with a short answer; ``empty``: neither),
CT200_STANDIN_REQUIRE_DEVICES (colon-separated paths, e.g. ``/dev/nvidia-uvm``:
the stand-in exits 1 at start while one is absent, as cuInit fails without the
uvm device node -- the boot-order test's fake driver tree creates it).
"""

import dataclasses
import enum
import hmac
import importlib.metadata
import json
import logging
import os
import shlex
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = "sglang-standin"
LOG = logging.getLogger(NAME)


def _plain(value):
    """JSON-safe copy of parsed arg values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    return str(value)


def parse_with_sglang(argv):
    """(version, args dict) from SGLang's own parser; SystemExit(2) on bad argv."""
    from sglang.srt.server_args import prepare_server_args  # the real package

    args = prepare_server_args(list(argv))
    values = None
    if hasattr(args, "resolved_dict"):  # 0.5.2x records
        try:
            values = args.resolved_dict()
        except Exception as exc:  # not resolvable without a GPU: fall back to raw fields
            LOG.info("resolved_dict unavailable (%s); reporting parsed values", exc)
    if values is None and dataclasses.is_dataclass(args):  # 0.5.11 dataclass
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args)}
    if values is None:
        values = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    return importlib.metadata.version("sglang"), _plain(values)


BEHAVIOUR_FILE = "standin.json"
BEHAVIOUR_LIMIT = 64 * 1024
DEFAULTS = {"accept_length": 3.5, "decode_tok_s": 40.0, "never_ready": False, "fail_rate": 0.0,
            "crash_on_start": False}
# Keys of standin.json only /metrics reads (absent: these values).
METRICS_DEFAULTS = {"queue_reqs": 0.0, "token_usage": 0.05, "ttft_s": 0.05}


def _argv_value(argv, flag):
    """The value of --flag VALUE or --flag=VALUE in argv (last one wins), else None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def behaviour_dir(argv):
    """The directory whose standin.json rules: the drafter's, else the model's."""
    return _argv_value(argv, "--speculative-draft-model-path") or _argv_value(argv, "--model-path")


def _read_standin_json(argv_paths, hostname=None):
    """(path, data) of standin.json in the drafter's directory (else the model's), with this host's own
    ``hosts`` override applied; ({} when there is none). ``argv_paths``: the stand-in's argv, or the directory."""
    directory = argv_paths if isinstance(argv_paths, str) else behaviour_dir(list(argv_paths))
    if not directory:
        return "", {}
    path = os.path.join(directory, BEHAVIOUR_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return path, {}
    try:
        raw = os.read(fd, BEHAVIOUR_LIMIT + 1)
    finally:
        os.close(fd)
    if len(raw) > BEHAVIOUR_LIMIT:
        raise ValueError("%s is larger than %d bytes" % (path, BEHAVIOUR_LIMIT))
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("%s is not a JSON object" % path)
    hosts = data.get("hosts") if isinstance(data.get("hosts"), dict) else {}
    override = hosts.get(hostname if hostname is not None else socket.gethostname())
    if isinstance(override, dict):  # one host's own behaviour (a release that fails on one machine only)
        data = dict(data, **override)
    return path, data


def _numbers(path, data, defaults):
    """DEFAULTS's keys of DATA, typed like the defaults (other keys are notes for the reader)."""
    out = dict(defaults)
    for key, value in data.items():
        if key not in defaults:
            continue
        if isinstance(defaults[key], bool):
            if not isinstance(value, bool):
                raise ValueError("%s: %s must be true or false, not %r" % (path, key, value))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("%s: %s must be a number, not %r" % (path, key, value))
        out[key] = value if isinstance(value, bool) else float(value)
    return out


def load_behaviour(argv_paths, environ=None, hostname=None):
    """The stand-in's behaviour: DEFAULTS, then CT200_STANDIN_ACCEPT_LENGTH, then standin.json.

    ``argv_paths`` is the stand-in's argv (the drafter / model paths are read from it) or
    directly the directory holding standin.json. A value of the wrong type is refused
    (ValueError naming the key): a test that plants a typo must not pass silently.
    """
    environ = os.environ if environ is None else environ
    defaults = dict(DEFAULTS)
    if environ.get("CT200_STANDIN_ACCEPT_LENGTH"):
        defaults["accept_length"] = float(environ["CT200_STANDIN_ACCEPT_LENGTH"])
    path, data = _read_standin_json(argv_paths, hostname)
    out = _numbers(path, data, defaults)
    if not 0.0 <= out["fail_rate"] <= 1.0:
        raise ValueError("%s: fail_rate must be between 0 and 1, not %r" % (path, out["fail_rate"]))
    if out["decode_tok_s"] <= 0:
        raise ValueError("%s: decode_tok_s must be above 0, not %r" % (path, out["decode_tok_s"]))
    return out


def load_metrics_behaviour(argv_paths, hostname=None):
    """The keys of the same standin.json that only /metrics reads (METRICS_DEFAULTS filled in)."""
    path, data = _read_standin_json(argv_paths, hostname)
    return _numbers(path, data, METRICS_DEFAULTS)


# SGLang 0.5.23's label sets: SchedulerMetricsCollector.init_new (no dp/priority) and tokenizer_metric_labels.
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
# SGLang's default time-to-first-token buckets (TokenizerMetricsCollector).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
# (name, type, help, extra labels) of every metric /metrics serves; names and labels as SGLang's.
METRICS = (
    ("sglang:num_running_reqs", "gauge", "The number of running requests.", ()),
    ("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", ()),
    ("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", ()),
    ("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", ()),
    ("sglang:token_usage", "gauge", "The token usage.", ()),
    ("sglang:spec_accept_length", "gauge", "The average acceptance length of speculative decoding.", ()),
    ("sglang:spec_accept_rate", "gauge", "The average acceptance rate of speculative decoding.", ()),
    ("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", ("is_streaming",)),
    ("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", ("is_streaming",)),
    ("sglang:num_requests_total", "counter", "Number of requests processed.", ("is_streaming",)),
    ("sglang:spec_verify_calls_total", "counter", "Number of speculative decoding verification calls.", ()),
    ("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
     ("is_streaming",)),
)
TOKENIZER_METRICS = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_requests_total",
                     "sglang:spec_verify_calls_total", "sglang:time_to_first_token_seconds")


def _labels(pairs):
    return "{%s}" % ",".join('%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"')) for k, v in pairs)


def render_metrics(standin):
    """Prometheus text exposition (format 0.0.4) of the stand-in's state, on SGLang's names and labels."""
    b, m = dict(standin.behaviour, **standin.metrics_behaviour), standin.metrics
    name = standin.served_name
    sched = (("model_name", name), ("engine_type", "unified"), ("tp_rank", 0), ("pp_rank", 0), ("moe_ep_rank", 0))
    tok = (("model_name", name), ("engine_type", "unified"))
    served = m["requests"] > 0
    draft_tokens = int(standin.args.get("speculative_num_draft_tokens") or 0)
    accept = float(b["accept_length"])
    values = {
        "sglang:num_running_reqs": [(sched, m["running"])],
        "sglang:num_queue_reqs": [(sched, b["queue_reqs"])],
        "sglang:gen_throughput": [(sched, float(b["decode_tok_s"]) if served else 0.0)],
        "sglang:cache_hit_rate": [(sched, 0.0)],
        "sglang:token_usage": [(sched, b["token_usage"])],
        "sglang:prompt_tokens_total": [(tok + (("is_streaming", "false"),), m["prompt_tokens"])],
        "sglang:generation_tokens_total": [(tok + (("is_streaming", "false"),), m["generation_tokens"])],
        "sglang:num_requests_total": [(tok + (("is_streaming", "false"),), m["requests"])],
    }
    if standin.speculative and served:  # like /server_info: known after the first verify step
        values["sglang:spec_accept_length"] = [(sched, accept)]
        values["sglang:spec_accept_rate"] = [(sched, max(0.0, min(1.0, (accept - 1) / max(1, draft_tokens - 1))))]
        values["sglang:spec_verify_calls_total"] = [(tok, m["requests"])]
    lines = []
    for metric, kind, text, _extra in METRICS:
        if metric == "sglang:time_to_first_token_seconds":
            lines += ["# HELP %s %s" % (metric, text), "# TYPE %s histogram" % metric]
            labels = tok + (("is_streaming", "false"),)
            cumulative = 0
            for bound, count in zip([repr(float(b)) for b in TTFT_BUCKETS] + ["+Inf"], m["ttft_buckets"]):
                cumulative += count
                lines.append("%s_bucket%s %d" % (metric, _labels(labels + (("le", bound),)), cumulative))
            lines.append("%s_sum%s %r" % (metric, _labels(labels), m["ttft_sum"]))
            lines.append("%s_count%s %d" % (metric, _labels(labels), m["requests"]))
            continue
        if metric not in values:
            continue
        lines += ["# HELP %s %s" % (metric, text), "# TYPE %s %s" % (metric, kind)]
        lines += ["%s%s %r" % (metric, _labels(labels), float(value)) for labels, value in values[metric]]
    return "\n".join(lines) + "\n"


class StandIn(object):
    def __init__(self, version, args, argv, behaviour=None):
        self.behaviour = dict(DEFAULTS, **(behaviour or {}))
        self.completions = 0  # completions asked for, failed ones included (fail_rate)
        self.version = version
        self.args = args
        self.argv = argv
        self.ready_at = None
        self.started = time.time()
        self.verify_steps = 0  # completions answered: each stands for the drafter's verify steps
        self.lock = threading.Lock()
        self.metrics_behaviour = load_metrics_behaviour(argv)  # queue_reqs, token_usage, ttft_s of standin.json
        self.metrics = {"requests": 0, "running": 0, "prompt_tokens": 0, "generation_tokens": 0, "ttft_sum": 0.0,
                        "ttft_buckets": [0] * (len(TTFT_BUCKETS) + 1)}

    def observe(self, prompt_tokens, generation_tokens):
        """One answered request in the /metrics counters and the TTFT histogram (behaviour ttft_s)."""
        ttft = float(self.metrics_behaviour["ttft_s"])
        with self.lock:
            m = self.metrics
            m["requests"] += 1
            m["prompt_tokens"] += prompt_tokens
            m["generation_tokens"] += generation_tokens
            m["ttft_sum"] += ttft
            for index, bound in enumerate(TTFT_BUCKETS + (float("inf"),)):
                if ttft <= bound:  # per-bucket counts; render_metrics sums them up
                    m["ttft_buckets"][index] += 1
                    break

    @property
    def speculative(self):
        return str(self.args.get("speculative_algorithm") or "").upper() not in ("", "NONE")

    def answered(self):
        with self.lock:
            self.verify_steps += 1

    def next_fails(self):
        """Whether this completion answers 500 (fail_rate, deterministic)."""
        rate = self.behaviour["fail_rate"]
        with self.lock:
            self.completions += 1
            n = self.completions
        return int(n * rate) > int((n - 1) * rate)

    def generate(self, max_tokens):
        """Tokens "generated" for a request, after the time decode_tok_s takes for them."""
        tokens = max(1, min(int(max_tokens or 16), 4096))
        time.sleep(tokens / self.behaviour["decode_tok_s"])
        return tokens

    def internal_state(self):
        state = {"standin": True}
        if self.speculative and self.verify_steps:
            state["avg_spec_accept_length"] = float(self.behaviour["accept_length"])
        return state

    @property
    def served_name(self):
        name = self.args.get("served_model_name")
        return name or self.args.get("model_path")

    def server_info(self):
        info = dict(self.args)
        info.update({
            "standin": True,
            "standin_note": "SGLANG TEST STAND-IN: argv parsed by SGLang's own parser, no model loaded",
            "version": self.version,
            "launch_command": " ".join(shlex.quote(a) for a in [sys.executable, "-m", "sglang.launch_server"]
                                       + self.argv),
            "internal_states": [self.internal_state()],
            "startup_time": self.started,
        })
        return info

    def models(self):
        return {"object": "list", "data": [{
            "id": self.served_name, "object": "model", "created": int(self.started),
            "owned_by": NAME, "root": self.args.get("model_path"),
            "max_model_len": self.args.get("context_length"),
        }]}


OPEN_PREFIXES = ("/health", "/ready", "/metrics")  # SGLang's probes need no key


def authorized(api_key, path, header):
    """SGLang's decide_request_auth for the NORMAL level: probes open, else Bearer KEY when a key is set."""
    if not api_key or path.startswith(OPEN_PREFIXES):
        return True
    parts = (header or "").split(" ", 1)
    return len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], api_key)


def chat_completion(standin, request):
    """An OpenAI chat.completion answer (the stand-in has no model: the text says so)."""
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        return 400, {"object": "error", "message": "messages must be a non-empty list", "code": 400}
    model = request.get("model") or standin.served_name
    if model != standin.served_name:
        return 404, {"object": "error", "message": "The model `%s` does not exist." % model, "code": 404}
    if standin.next_fails():
        return 500, {"object": "error", "message": "stand-in fail_rate: this completion fails", "code": 500}
    text = "[sglang-standin: no model loaded; %d message(s) received]" % len(messages)
    time.sleep(float(os.environ.get("CT200_STANDIN_COMPLETION_SECONDS", "0")))  # a request in flight, to drain
    max_tokens = request.get("max_tokens") or request.get("max_completion_tokens")
    tokens = standin.generate(max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None)
    standin.answered()
    standin.observe(sum(len(str(m.get("content", ""))) // 4 for m in messages if isinstance(m, dict)), tokens)
    mode = os.environ.get("CT200_STANDIN_ANSWER", "content")
    content, reasoning = {"reasoning": (None, text), "empty": ("", None)}.get(mode, (text, None))
    return 200, {
        "id": "chatcmpl-standin-%d" % int(time.time() * 1000), "object": "chat.completion",
        "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "reasoning_content": reasoning,
                                             "tool_calls": None},
                     "logprobs": None, "finish_reason": "stop", "matched_stop": None}],
        "usage": {"prompt_tokens": sum(len(str(m.get("content", ""))) // 4 for m in messages if isinstance(m, dict)),
                  "completion_tokens": tokens, "total_tokens": 0},
        "standin": True,
    }


def make_handler(standin):
    class Handler(BaseHTTPRequestHandler):
        server_version = NAME

        def log_message(self, fmt, *args):
            LOG.info("%s %s", self.address_string(), fmt % args)

        def _send(self, status, payload):
            body = json.dumps(payload).encode("utf-8") if payload is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-SGLang-Standin", "true")
            self.end_headers()
            self.wfile.write(body)

        def _warm(self):
            if standin.behaviour["never_ready"]:
                return False
            return standin.ready_at is not None and time.time() >= standin.ready_at

        def _allowed(self, path):
            if authorized(standin.args.get("api_key"), path, self.headers.get("Authorization")):
                return True
            self._send(401, {"error": "Unauthorized"})
            return False

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if not self._allowed(path):
                return None
            if path in ("/health", "/health_generate", "/ready"):
                if self._warm():
                    return self._send(200, None)
                return self._send(503, {"error": "warming up (stand-in)"})
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, standin.server_info())
            if path == "/v1/models":
                return self._send(200, standin.models())
            if path == "/metrics":
                body = render_metrics(standin).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-SGLang-Standin", "true")
                self.end_headers()
                self.wfile.write(body)
                return None
            return self._send(404, {"error": "not served by the stand-in: %s" % path})

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._allowed(path):
                return None
            if path not in ("/generate", "/v1/chat/completions"):
                return self._send(404, {"error": "not served by the stand-in: %s" % path})
            try:
                request = json.loads(raw or b"{}")
            except ValueError:
                return self._send(400, {"error": "body is not JSON"})
            if not isinstance(request, dict):
                return self._send(400, {"error": "body is not a JSON object"})
            if path == "/v1/chat/completions":
                if not self._warm():
                    return self._send(503, {"error": "warming up (stand-in)"})
                return self._send(*chat_completion(standin, request))
            if not self._warm():
                return self._send(503, {"error": "warming up (stand-in)"})
            if standin.next_fails():
                return self._send(500, {"error": "stand-in fail_rate: this request fails"})
            params = request.get("sampling_params") if isinstance(request.get("sampling_params"), dict) else {}
            tokens = standin.generate(params.get("max_new_tokens") if isinstance(params.get("max_new_tokens"), int)
                                      else None)
            standin.answered()
            standin.observe(0, tokens or 0)
            meta = {"standin": True, "completion_tokens": tokens, "spec_verify_ct": 0}
            if standin.speculative:
                meta.update(spec_verify_ct=1, spec_accept_length=standin.internal_state()["avg_spec_accept_length"])
            return self._send(200, {"text": "[sglang-standin: no model]", "meta_info": meta})

    return Handler


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s " + NAME + " %(message)s", stream=sys.stderr)
    LOG.info("SGLANG TEST STAND-IN (not SGLang, no model is loaded); parsing argv with SGLang's parser")
    missing = [p for p in os.environ.get("CT200_STANDIN_REQUIRE_DEVICES", "").split(":") if p and not os.path.exists(p)]
    if missing:  # checked first (SGLang's cuInit comes after parsing): the test pays no parse for it
        LOG.error("CUDA init failed: %s missing (stand-in check: cuInit needs the uvm device node, which nothing "
                  "created before this start)", ", ".join(missing))
        return 1
    version, args = parse_with_sglang(argv)  # exits 2 with SGLang's message on a bad argv
    LOG.info("argv accepted by sglang %s's parser: speculative_algorithm=%s draft=%s num_draft_tokens=%s "
             "api_key=%s", version, args.get("speculative_algorithm"), args.get("speculative_draft_model_path"),
             args.get("speculative_num_draft_tokens"), "set" if args.get("api_key") else "none")
    behaviour = load_behaviour(argv)
    LOG.info("behaviour (%s in %s, else defaults): %s", BEHAVIOUR_FILE, behaviour_dir(argv),
             json.dumps(behaviour, sort_keys=True))
    if behaviour["crash_on_start"]:
        LOG.error("stand-in crash_on_start: exiting 1 after parsing, as a release that cannot start does")
        return 1
    standin = StandIn(version, args, argv, behaviour)
    time.sleep(float(os.environ.get("CT200_STANDIN_LOAD_SECONDS", "2")))
    host = args.get("host") or "127.0.0.1"
    port = int(args.get("port") or 30000)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # SIGTERM drains like SGLang's graceful stop: serve_forever returns, server_close closes the
        # listening socket (new connections are refused) and then joins the requests in flight.
        daemon_threads = False
        block_on_close = True

    server = Server((host, port), make_handler(standin))
    standin.ready_at = time.time() + float(os.environ.get("CT200_STANDIN_WARMUP_SECONDS", "1"))

    def stop(signum, frame):
        LOG.info("signal %s: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    LOG.info("listening on %s:%d (stand-in; ready after warm-up)", host, port)
    server.serve_forever()
    server.server_close()
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
