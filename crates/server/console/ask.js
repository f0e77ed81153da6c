// Ask: the loop live, from POST /v1/ask's event stream (neuralcore.events/v1), then the
// answer with its citations, each opening the cited span of its chunk.
import { api, authHeaders, check, checkbox, collPath, collectionSelect, errorBox, field, fill, guard, h, link, num } from "./dom.js";
import { recordRun } from "./runs.js";

const SWITCHES = [
  ["no_retrieval", "No retrieval"],
  ["no_grade", "No grading"],
  ["no_verify", "No verification"],
  ["no_refine", "No refinement"],
  ["no_reflect", "No reflection"],
];

export async function askPage(root) {
  const question = h("textarea", { id: "question", name: "question", rows: 3, required: true, maxlength: 4096 });
  const collection = await collectionSelect("ask-collection");
  const iterations = h("input", { id: "max-iterations", type: "number", min: 1, max: 100, placeholder: "config" });
  const memory = checkbox("Recall memories too (needs a write key)", "memory", false);
  const settings = (which) => h("fieldset", { class: "switches", "data-setting": which },
    h("legend", {}, which === "a" ? "Ablations" : "Second setting"),
    SWITCHES.map(([name, label]) => checkbox(label, name, which === "b" && name === "no_grade")));
  const a = settings("a"), b = settings("b");
  b.hidden = true;
  const compare = checkbox("Side by side: run a second setting on the same question", "compare", false);
  compare.querySelector("input").addEventListener("change", (e) => { b.hidden = !e.target.checked; });
  const submit = h("button", { type: "submit", id: "ask-submit" }, "Ask");
  const form = h("form", { class: "ask-form", id: "ask-form" },
    field("Question", question),
    h("div", { class: "row" }, field("Collection", collection), field("Max iterations", iterations)),
    h("details", {}, h("summary", {}, "Settings"), memory, a, compare, b),
    submit);
  const results = h("div", { class: "runs-side", id: "ask-results" });
  fill(root, h("h1", {}, "Ask"), form, results);
  question.focus();
  question.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const q = question.value.trim();
    if (!q) return;
    const base = {
      question: q,
      collection: collection.value,
      memory: memory.querySelector("input").checked,
    };
    if (iterations.value) base.max_iterations = Number(iterations.value);
    const switchesOf = (fs) => Object.fromEntries(SWITCHES.map(([n]) => [n, fs.querySelector(`input[name=${n}]`).checked]));
    const runs = [{ label: "Setting A", req: { ...base, switches: switchesOf(a) } }];
    if (!b.hidden) runs.push({ label: "Setting B", req: { ...base, switches: switchesOf(b) } });
    fill(results);
    results.classList.toggle("two", runs.length === 2);
    submit.disabled = true;
    try {
      await Promise.all(runs.map((r) => {
        const col = h("section", { class: "run", "aria-label": r.label });
        results.appendChild(col);
        return runAsk(col, r.label, r.req);
      }));
    } finally {
      submit.disabled = false;
    }
  });
}

/** Read server-sent events from a fetch response: calls onEvent(kind, data) per event. */
async function readSse(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let at;
    while ((at = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at).replace(/^\r?\n\r?\n/, "");
      let kind = "message";
      const data = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith(":")) continue; // keep-alive comment
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (name === "event") kind = val;
        else if (name === "data") data.push(val);
      }
      if (!data.length) continue;
      let parsed;
      try { parsed = JSON.parse(data.join("\n")); } catch (_) { continue; }
      onEvent(kind, parsed);
    }
  }
}

const VERDICT_CLASS = { CORRECT: "ok", VERIFIED: "ok", AMBIGUOUS: "warn", INCORRECT: "bad", DROPPED: "bad" };

export function verdictBadge(v) {
  return h("span", { class: "verdict v-" + (VERDICT_CLASS[v] || "none"), "data-verdict": v }, v);
}

function evidenceName(e) {
  if (!e) return "?";
  return e.kind === "memory" ? "memory " + e.id : `${e.doc}#${e.ordinal}`;
}

/** One timeline entry for an event, or null for events shown elsewhere. */
export function describe(kind, d) {
  const it = d.iteration ? `it ${d.iteration}` : "";
  switch (kind) {
    case "accepted": return ["run " + d.run_id];
    case "observe": return [it, " observing: ", Object.entries(d.observed || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "empty board"];
    case "decision": return [it, " ", d.decision.retrieve ? "retrieve" : "no retrieval", ": ", d.decision.reason];
    case "plan": return [it, ` ${d.plan.task} (${d.plan.complexity}): `, (d.plan.queries || []).join(" · ")];
    case "sub_query": return [it, ` sub-query ${d.index + 1}: `, d.query];
    case "retrieved": return [it, ` ${d.hits.length} hits for “`, d.query, "”: ",
      d.hits.slice(0, 5).map((x) => `${evidenceName(x.evidence)} ${num(x.score)}`).join(", ")];
    case "verdict":
    case "verification": {
      const g = d.graded;
      return [it, " ", verdictBadge(g.verdict), " ", h("strong", {}, g.title || g.doc), ` #${g.ordinal} score ${num(g.score)} — `, h("span", { class: "reason" }, g.reason)];
    }
    case "refined": return [it, ` ${d.strips.length} strips kept`];
    case "reflection": {
      const r = d.reflection;
      return [it, ` completeness ${num(r.completeness)}${r.sufficient ? " (sufficient)" : ""}`,
        r.gaps && r.gaps.length ? h("span", { class: "gaps" }, " gaps: " + r.gaps.join("; ")) : "",
        r.next_queries && r.next_queries.length ? " → next: " + r.next_queries.join(" · ") : ""];
    }
    case "stage": {
      const s = d.stage;
      return [it, ` ${s.stage} `, s.skipped ? `skipped (${s.skipped})` : `${num(s.ms, 1)} ms`];
    }
    case "failure": return [it, ` ${d.tool} failed: `, d.message];
    case "stopped": return ["stopped: ", d.reason];
    case "answer": return [`answer (${d.method}, confidence ${num(d.confidence)})`];
    case "abstention": return ["abstained"];
    case "report": return [`report: ${d.report.iterations.length} iteration(s), ${num(d.report.budget.elapsed_ms, 0)} ms`];
    case "error": return [h("strong", {}, d.type), ": ", d.detail];
    case "done": return ["done"];
    case "delta": return null;
    default: return [kind];
  }
}

/** Run one ask into `col`: its live timeline, then its answer. */
async function runAsk(col, label, req) {
  const status = h("p", { class: "status", role: "status" }, "Asking…");
  const timeline = h("ol", { class: "timeline", "aria-label": "the loop's events" });
  const answer = h("div", { class: "answer", "aria-live": "polite" });
  const cited = h("div", { class: "cited" });
  const flags = Object.entries(req.switches).filter(([, v]) => v).map(([k]) => k.replace("_", "-"));
  fill(col, h("h2", {}, label, h("span", { class: "muted" }, flags.length ? " " + flags.join(", ") : " full loop")),
    status, answer, cited, h("details", { open: true, class: "trace" }, h("summary", {}, "The loop, live"), timeline));
  const t0 = performance.now();
  let first = null, report = null, draft = null;
  const trace = [];
  try {
    const res = await check(await fetch("/v1/ask", {
      method: "POST",
      headers: authHeaders({ "Content-Type": "application/json", Accept: "text/event-stream" }),
      body: JSON.stringify(req),
    }));
    await readSse(res, (kind, d) => {
      if (kind === "delta") {
        draft = draft || answer.appendChild(h("p", { class: "draft muted" }));
        draft.textContent += d.text;
        return;
      }
      const parts = describe(kind, d);
      if (parts) {
        timeline.appendChild(h("li", { class: "ev ev-" + kind, "data-kind": kind },
          h("span", { class: "kind" }, kind), h("span", { class: "what" }, parts)));
        if (first === null) {
          first = performance.now() - t0;
          timeline.dataset.firstEventMs = first.toFixed(1);
        }
        trace.push({ kind, text: timeline.lastChild.textContent.slice(0, 300) });
      }
      if (kind === "answer") showAnswer(answer, cited, req.collection, d);
      else if (kind === "abstention") showAbstention(answer, d);
      else if (kind === "report") report = d.report;
      else if (kind === "error") answer.appendChild(errorBox({ message: d.detail, status: null }));
    });
  } catch (e) {
    fill(status, errorBox(e));
    return;
  }
  const ms = performance.now() - t0;
  status.textContent = `Done in ${(ms / 1000).toFixed(2)} s; first event after ${num(first, 0)} ms.`;
  col.dataset.done = "1";
  if (report) {
    // The server keeps the run itself (GET /v1/runs); the tab keeps what only it saw.
    recordRun({
      run_id: report.run_id, switches: req.switches, latency_ms: Math.round(ms),
      first_event_ms: first === null ? null : Math.round(first), trace,
    });
  }
}

/** The answer with each `[n]` a button opening citation n. */
export function showAnswer(answer, cited, collection, d) {
  const byN = new Map(d.citations.map((c) => [c.n, c]));
  const p = h("p", { class: "answer-text" });
  for (const piece of d.answer.split(/(\[\d+\])/)) {
    const m = /^\[(\d+)\]$/.exec(piece);
    const c = m && byN.get(Number(m[1]));
    if (c) {
      const b = h("button", { type: "button", class: "cite", "data-n": c.n, "aria-label": `citation ${c.n}: ${c.title || c.doc}` }, `[${c.n}]`);
      b.addEventListener("click", () => openCitation(cited, collection, c));
      p.appendChild(b);
    } else p.appendChild(document.createTextNode(piece));
  }
  const list = h("ol", { class: "citations" });
  for (const c of d.citations) {
    const b = h("button", { type: "button", class: "link", "data-n": c.n }, c.title || c.doc);
    b.addEventListener("click", () => openCitation(cited, collection, c));
    list.appendChild(h("li", { value: c.n }, b, h("span", { class: "muted" }, " — ", c.source || "", c.locator ? ` (${c.locator})` : "",
      c.span ? ` chars ${c.span[0]}–${c.span[1]}` : "")));
  }
  fill(answer, h("h3", {}, "Answer"), p, h("p", { class: "muted" }, `${d.method}, confidence ${num(d.confidence)}`), list);
}

export function showAbstention(answer, d) {
  fill(answer, h("div", { class: "abstention" },
    h("h3", {}, "Insufficient evidence"),
    h("p", {}, d.reason),
    d.missing && d.missing.length ? [h("h4", {}, "What is missing"), h("ul", { class: "missing" }, d.missing.map((m) => h("li", {}, m)))] : ""));
}

/** `text` with the characters [from, to) in a <mark> (offsets in code points). */
export function highlighted(text, from, to) {
  const chars = Array.from(text);
  const a = Math.max(0, Math.min(chars.length, from)), b = Math.max(a, Math.min(chars.length, to));
  return h("pre", { class: "doc-text" },
    chars.slice(0, a).join(""), h("mark", {}, chars.slice(a, b).join("")), chars.slice(b).join(""));
}

/** Show the cited span: fetch the chunk (or the memory) and mark the span in it. */
async function openCitation(cited, collection, c) {
  fill(cited, h("p", { class: "muted" }, `Opening [${c.n}]…`));
  await guard(cited, async () => {
    const ev = c.evidence || { kind: "chunk", doc: c.doc, ordinal: c.ordinal };
    let head, body;
    if (ev.kind === "memory") {
      const m = await api("GET", "/v1/memories/" + encodeURIComponent(ev.id));
      head = ["memory ", link(ev.id, "memory", ev.id)];
      body = highlighted(m.memory.text, 0, Array.from(m.memory.text).length);
    } else {
      const chunk = await api("GET", collPath(collection, "documents", ev.doc, "chunks", String(ev.ordinal)));
      const off = chunk.span ? chunk.span[0] : 0;
      head = [link(chunk.title || ev.doc, "doc", collection, ev.doc), ` chunk ${chunk.ordinal}`,
        chunk.section && chunk.section.length ? " — " + chunk.section.join(" › ") : "",
        c.span ? `, chars ${c.span[0]}–${c.span[1]} of the document` : ""];
      body = c.span ? highlighted(chunk.text, c.span[0] - off, c.span[1] - off) : highlighted(chunk.text, 0, 0);
    }
    fill(cited, h("h3", {}, `[${c.n}] `, head), body);
    cited.querySelector("mark")?.scrollIntoView({ block: "nearest" });
  });
}
