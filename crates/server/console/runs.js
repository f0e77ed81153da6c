// Runs: the asks of this browser tab. No API lists past asks, so the console keeps the
// ones it ran in sessionStorage (newest first, at most 50), each with its trace.
import { fill, h, link, num, when } from "./dom.js";

const RUNS = "neuralcore.runs";

export function loadRuns() {
  try {
    return JSON.parse(sessionStorage.getItem(RUNS) || "[]");
  } catch (_) {
    return [];
  }
}

export function recordRun(run) {
  const runs = [run, ...loadRuns()].slice(0, 50);
  try {
    sessionStorage.setItem(RUNS, JSON.stringify(runs));
  } catch (_) {
    // Storage full: keep the summaries, drop the traces.
    sessionStorage.setItem(RUNS, JSON.stringify(runs.map((r) => ({ ...r, trace: [] }))));
  }
}

export async function runsPage(root, runId) {
  const runs = loadRuns();
  const note = h("p", { class: "note" },
    "The server keeps each ask's trace in its Mind under the run id (",
    h("code", {}, "neuralcore mind keys --run RUN_ID --values"),
    ") but has no route listing past asks, so this page shows the asks made from this browser tab only (kept in sessionStorage, gone when the tab closes).");
  if (runId) {
    const r = runs.find((x) => x.run_id === runId);
    if (!r) {
      fill(root, h("h1", {}, "Run"), note, h("div", { class: "error", role: "alert" }, h("strong", {}, "Not found: "), "no run " + runId + " in this tab"));
      return;
    }
    fill(root, h("h1", {}, "Run ", h("code", {}, r.run_id)), link("← all runs", "runs"),
      h("dl", { class: "facts" },
        h("dt", {}, "Question"), h("dd", {}, r.question),
        h("dt", {}, "Collection"), h("dd", {}, r.collection),
        h("dt", {}, "Answer"), h("dd", {}, r.answer),
        h("dt", {}, "Latency"), h("dd", {}, `${r.latency_ms} ms (first event ${r.first_event_ms} ms)`),
        h("dt", {}, "Stopped"), h("dd", {}, r.stopped || "–")),
      h("h2", {}, "Trace"),
      h("ol", { class: "timeline" }, (r.trace || []).map((e) => h("li", { class: "ev ev-" + e.kind }, e.text))));
    return;
  }
  const rows = runs.map((r) => h("tr", {},
    h("td", {}, when(r.at)),
    h("td", {}, link(r.question, "runs", r.run_id)),
    h("td", {}, r.collection),
    h("td", { class: "num" }, String(r.latency_ms)),
    h("td", { class: "num" }, String(r.first_event_ms ?? "–")),
    h("td", { class: "num" }, String(r.iterations)),
    h("td", {}, r.abstained ? "abstained" : `${r.method} ${num(r.confidence)}`),
    h("td", {}, Object.entries(r.switches || {}).filter(([, v]) => v).map(([k]) => k).join(", ") || "full")));
  fill(root, h("h1", {}, "Runs"), note,
    runs.length
      ? h("div", { class: "scroll" }, h("table", { id: "runs-table" },
        h("thead", {}, h("tr", {}, ["When", "Question", "Collection", "Latency ms", "First event ms", "Iterations", "Outcome", "Switches"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows)))
      : h("p", {}, "No asks yet in this tab: ", link("ask a question", "ask"), "."));
}
