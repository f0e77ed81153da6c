// Runs: the tenant's recent asks, from GET /v1/runs (kept by the server for 7 days,
// whichever front end asked), and one run's stored report — its answer, verdicts and the
// loop iteration by iteration — from GET /v1/runs/{id}. What only the browser can know
// about the asks of this tab (time to the first event, the switches) is kept in
// sessionStorage and shown beside them.
import { api, fill, guard, h, link, num, when } from "./dom.js";
import { describe, showAbstention, showAnswer, verdictBadge } from "./ask.js";

const RUNS = "neuralcore.runs";

/** This tab's extras by run id. */
function tabRuns() {
  try {
    return new Map(JSON.parse(sessionStorage.getItem(RUNS) || "[]").map((r) => [r.run_id, r]));
  } catch (_) {
    return new Map();
  }
}

/** Keep what this tab saw of a run (at most 50 runs). */
export function recordRun(run) {
  const runs = [run, ...tabRuns().values()].slice(0, 50);
  try {
    sessionStorage.setItem(RUNS, JSON.stringify(runs));
  } catch (_) {
    // Storage full: keep the timings, drop the live traces.
    sessionStorage.setItem(RUNS, JSON.stringify(runs.map((r) => ({ ...r, trace: [] }))));
  }
}

function switchesOf(extra) {
  if (!extra) return "–";
  return Object.entries(extra.switches || {}).filter(([, v]) => v).map(([k]) => k).join(", ") || "full";
}

export async function runsPage(root, runId) {
  if (runId) return runPage(root, runId);
  const { runs } = await api("GET", "/v1/runs");
  const extras = tabRuns();
  const note = h("p", { class: "note" },
    "The asks of this key's tenant of the last 7 days, newest first — from this console, the API, OpenAI and ACAI clients or MCP alike. ",
    "The time to the first event and the switches are known for this tab's asks only.");
  const rows = runs.map((r) => {
    const x = extras.get(r.run_id);
    return h("tr", { "data-run": r.run_id },
      h("td", {}, when(r.started_ms)),
      h("td", {}, link(r.question, "runs", r.run_id)),
      h("td", {}, r.collection),
      h("td", { class: "num" }, String(r.latency_ms)),
      h("td", { class: "num" }, String(x?.first_event_ms ?? "–")),
      h("td", { class: "num" }, String(r.iterations)),
      h("td", {}, r.abstained ? "abstained" : `${r.method} ${num(r.confidence)}`),
      h("td", {}, switchesOf(x)));
  });
  fill(root, h("h1", {}, "Runs"), note,
    runs.length
      ? h("div", { class: "scroll" }, h("table", { id: "runs-table" },
        h("thead", {}, h("tr", {}, ["When", "Question", "Collection", "Latency ms", "First event ms", "Iterations", "Outcome", "Switches"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows)))
      : h("p", {}, "No asks in the last 7 days: ", link("ask a question", "ask"), "."));
}

/** The loop of a stored report as the live page's timeline entries: (kind, data) pairs. */
function traceOf(report) {
  const out = [];
  for (const it of report.iterations || []) {
    const iteration = it.n;
    out.push(["observe", { iteration, observed: it.observed }]);
    if (it.decision) out.push(["decision", { iteration, decision: it.decision }]);
    if (it.plan) out.push(["plan", { iteration, plan: it.plan }]);
    (it.queries || []).forEach((query, index) => out.push(["sub_query", { iteration, index, query }]));
    for (const g of report.verdicts || []) {
      if (g.iteration === iteration) out.push(["verdict", { iteration, graded: g }]);
    }
    for (const stage of it.stages || []) out.push(["stage", { iteration, stage }]);
    if (it.reflection) out.push(["reflection", { iteration, reflection: it.reflection }]);
  }
  for (const stage of report.finish || []) out.push(["stage", { iteration: null, stage }]);
  for (const f of report.failures || []) {
    const at = f.indexOf(": ");
    out.push(["failure", { iteration: null, tool: at < 0 ? "a stage" : f.slice(0, at), message: at < 0 ? f : f.slice(at + 2) }]);
  }
  if (report.budget && report.budget.stopped) out.push(["stopped", { reason: report.budget.stopped }]);
  out.push(report.abstained ? ["abstention", {}] : ["answer", report]);
  return out;
}

async function runPage(root, runId) {
  const r = await api("GET", "/v1/runs/" + encodeURIComponent(runId));
  const x = tabRuns().get(r.run_id);
  const answer = h("div", { class: "answer", id: "run-answer" });
  const cited = h("div", { class: "cited" });
  if (r.abstained) showAbstention(answer, { reason: r.note || r.answer, missing: r.missing });
  else showAnswer(answer, cited, r.collection, r);
  const timeline = h("ol", { class: "timeline", id: "run-trace", "aria-label": "the loop, iteration by iteration" },
    traceOf(r).map(([kind, d]) => {
      const parts = describe(kind, d);
      return parts && h("li", { class: "ev ev-" + kind, "data-kind": kind },
        h("span", { class: "kind" }, kind), h("span", { class: "what" }, parts));
    }));
  const verdicts = (r.verdicts || []).map((g) => h("tr", {},
    h("td", { class: "num" }, String(g.iteration)),
    h("td", {}, g.title || g.doc, h("span", { class: "muted" }, ` #${g.ordinal}`)),
    h("td", {}, verdictBadge(g.verdict)),
    h("td", { class: "num" }, num(g.score)),
    h("td", {}, g.query),
    h("td", { class: "reason" }, g.reason)));
  const b = r.budget || {};
  // A user's word on the answer: its cited passages become training pairs (GET /v1/feedback).
  const marked = h("p", { id: "mark-result", role: "status" });
  const marks = r.abstained ? null : h("div", { class: "signals", id: "run-mark", role: "group", "aria-label": "mark the answer" },
    h("span", { class: "muted" }, "Was this answer right? "),
    ["good", "bad"].map((verdict) => {
      const button = h("button", { type: "button", "data-verdict": verdict }, verdict === "good" ? "Good answer" : "Bad answer");
      button.addEventListener("click", () => guard(marked, async () => {
        const m = await api("POST", "/v1/runs/" + encodeURIComponent(r.run_id) + "/mark", { verdict });
        fill(marked, `Marked ${m.verdict}: ${m.passages.length} passage(s) kept as training pairs` +
          (m.memories.length ? `, ${m.memories.length} memory(ies) ${verdict === "good" ? "confirmed" : "corrected"}` : "") + ".");
      }));
      return button;
    }), marked);
  fill(root, h("h1", {}, "Run ", h("code", {}, r.run_id)), link("← all runs", "runs"),
    h("dl", { class: "facts", id: "run-facts" },
      h("dt", {}, "Question"), h("dd", {}, r.question),
      h("dt", {}, "Collection"), h("dd", {}, r.collection),
      h("dt", {}, "Outcome"), h("dd", {}, r.abstained ? "abstained" : `${r.method}, confidence ${num(r.confidence)}`),
      h("dt", {}, "Loop"), h("dd", {}, `${(r.iterations || []).length} iteration(s), ${num(b.elapsed_ms, 0)} ms`,
        x ? ` (in this tab: ${x.latency_ms} ms, first event ${x.first_event_ms ?? "–"} ms)` : ""),
      h("dt", {}, "Stopped"), h("dd", {}, b.stopped || "–"),
      h("dt", {}, "Cost"), h("dd", {}, `${r.cost ? r.cost.tokens : 0} LLM tokens`)),
    answer, cited, marks,
    h("h2", {}, "Verdicts"),
    verdicts.length
      ? h("div", { class: "scroll" }, h("table", { id: "run-verdicts" },
        h("thead", {}, h("tr", {}, ["Iteration", "Chunk", "Verdict", "Score", "Sub-query", "Reason"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, verdicts)))
      : h("p", { class: "muted" }, "No chunk was graded."),
    h("h2", {}, "Trace"), timeline,
    x && x.trace && x.trace.length
      ? h("details", { class: "trace" }, h("summary", {}, "As this tab saw it live"),
        h("ol", { class: "timeline" }, x.trace.map((e) => h("li", { class: "ev ev-" + e.kind }, e.text))))
      : null);
}
