// Memory: search and list with trust bars, one memory's audit, signals and relations,
// and the L0/L1/L2 tiers a session loads.
import { api, checkbox, errorBox, field, fill, guard, h, link, num, trustBar, when } from "./dom.js";

const SIGNALS = ["used", "confirmed", "ignored", "corrected"];

function memoryRow(m, extra) {
  return h("li", { class: "memory", "data-id": m.id },
    h("div", { class: "memory-head" }, trustBar(m.trust), " ", link(m.id, "memory", m.id),
      h("span", { class: "muted" }, ` ${m.kind}`, m.scope && m.scope.project ? ` · ${m.scope.project}` : "", m.status !== "active" ? ` · ${m.status}` : ""),
      extra || ""),
    h("p", {}, m.text));
}

export async function memoryPage(root) {
  const q = h("input", { id: "memory-query", type: "search", name: "query", required: true });
  const project = h("input", { id: "memory-project", name: "project" });
  const superseded = checkbox("Include superseded", "include_superseded", false);
  const search = h("form", { id: "memory-search", class: "search-form" },
    field("Search memories", q), h("div", { class: "row" }, field("Project", project)), superseded, h("button", { type: "submit" }, "Search"));
  const hits = h("div", { id: "memory-hits" });
  search.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await guard(hits, async () => {
      const body = { query: q.value, include_superseded: superseded.querySelector("input").checked };
      if (project.value.trim()) body.project = project.value.trim();
      const res = await api("POST", "/v1/memories/search", body);
      fill(hits, h("h2", {}, `Hits (${res.hits.length})`), h("ul", { class: "memories" }, res.hits.map((x) =>
        memoryRow(x.memory, h("span", { class: "muted" }, ` score ${num(x.score, 3)}`, x.flags.length ? " · " + x.flags.join(", ") : "")))));
    });
  });

  const status = h("select", { id: "memory-status", name: "status" }, ["active", "archived", "purged", "all"].map((s) => h("option", { value: s }, s)));
  const all = h("div", { id: "memory-list" });
  const showList = () => guard(all, async () => {
    const res = await api("GET", "/v1/memories?status=" + encodeURIComponent(status.value));
    fill(all, res.memories.length ? h("ul", { class: "memories" }, res.memories.map((m) => memoryRow(m))) : h("p", {}, "No memories."));
  });
  status.addEventListener("change", showList);

  const openId = h("input", { id: "open-memory", name: "id", required: true, spellcheck: false });
  const open = h("form", { class: "inline", id: "open-memory-form" }, field("Open a memory by id", openId), h("button", { type: "submit" }, "Open"));
  open.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = "#/memory/" + encodeURIComponent(openId.value.trim()); });

  fill(root, h("h1", {}, "Memory"), search, hits, open, tiersForm(), graphForm(), h("h2", {}, "All memories"), field("Status", status), all);
  await showList();
}

/** The knowledge graph around an entity: the memories naming it (superseded and
 * contradicting ones marked) and the entities they also name, each a link to its own
 * neighbourhood. */
function graphForm() {
  const entity = h("input", { id: "graph-entity", name: "entity", required: true, minlength: 2, maxlength: 80 });
  const out = h("div", { id: "graph" });
  const show = (name) => guard(out, async () => {
    entity.value = name;
    const g = await api("GET", "/v1/memory/graph?entity=" + encodeURIComponent(name));
    if (!g.entities.length) {
      fill(out, h("p", { class: "muted" }, `No entity "${name}" in the memories.`));
      return;
    }
    const sections = [];
    for (const n of g.entities) {
      const items = [];
      for (const id of n.memories.slice(0, 20)) {
        let got;
        try {
          got = await api("GET", "/v1/memories/" + encodeURIComponent(id));
        } catch (e) {
          items.push(h("li", {}, link(id, "memory", id), " ", errorBox(e)));
          continue;
        }
        const rels = got.relations || [];
        const marks = [];
        if (got.memory.status !== "active") marks.push(got.memory.status);
        if (rels.some((r) => r.kind === "SUPERSEDES" && r.to === id)) marks.push("superseded");
        if (rels.some((r) => r.kind === "CONTRADICTS")) marks.push("contradicted");
        items.push(h("li", { class: "memory" + (marks.includes("superseded") ? " superseded" : "") + (marks.includes("contradicted") ? " contradicts" : ""), "data-id": id },
          trustBar(got.memory.trust), " ", link(id, "memory", id),
          marks.length ? h("span", { class: "rel" }, " " + marks.join(", ")) : "", " ", got.memory.text));
      }
      const more = n.memories.length > 20 ? h("p", { class: "muted" }, `and ${n.memories.length - 20} more`) : "";
      const related = n.related.map(([node, count]) => {
        const b = h("button", { type: "button", class: "linkish", "data-node": node }, `${node} (${count})`);
        b.addEventListener("click", () => show(node));
        return h("li", {}, b);
      });
      sections.push(h("section", { class: "entity", "data-node": n.node },
        h("h3", {}, h("code", {}, n.node)),
        h("h4", {}, `Memories naming it (${n.memories.length})`), h("ul", { class: "plain" }, items), more,
        h("h4", {}, "Entities they also name"), related.length ? h("ul", { class: "plain" }, related) : h("p", { class: "muted" }, "none")));
    }
    fill(out, ...sections);
  });
  const form = h("form", { id: "graph-form", class: "search-form" },
    field("Graph around an entity (a name or ent:kind:name)", entity), h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); show(entity.value.trim()); });
  return h("section", {}, h("h2", {}, "Knowledge graph"), form, out);
}

/** The tiers: what an agent loads at a session's start, with token counts. */
function tiersForm() {
  const project = h("input", { id: "tiers-project", name: "project" });
  const session = h("input", { id: "tiers-session", name: "session" });
  const query = h("input", { id: "tiers-query", name: "query" });
  const out = h("div", { id: "tiers" });
  const form = h("form", { id: "tiers-form", class: "search-form" },
    h("div", { class: "row" }, field("Project", project), field("Session", session), field("Query (L2)", query)),
    h("button", { type: "submit" }, "Show tiers"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await guard(out, async () => {
      const qs = new URLSearchParams();
      for (const [k, el] of [["project", project], ["session", session], ["query", query]]) if (el.value.trim()) qs.set(k, el.value.trim());
      const t = await api("GET", "/v1/memory/tiers?" + qs);
      const tier = (name, title, items, tokens) => h("section", { class: "tier", "data-tier": name },
        h("h3", {}, `${title} — ${tokens} tokens`),
        items.length ? h("ul", { class: "plain" }, items.map((m) => h("li", {}, trustBar(m.trust), " ", link(m.id, "memory", m.id), ` ${m.kind} (${m.tokens} tokens): `, m.text))) : h("p", { class: "muted" }, "empty"));
      fill(out, h("p", { class: "muted" }, `Tokens counted by ${t.counted_by}; total ${t.l0_tokens + t.l1_tokens + t.l2_tokens}.`),
        h("div", { class: "columns three" },
          tier("l0", "L0 summary", t.l0, t.l0_tokens), tier("l1", "L1 rules and decisions", t.l1, t.l1_tokens), tier("l2", "L2 search", t.l2, t.l2_tokens)));
    });
  });
  return h("section", {}, h("h2", {}, "Tiers (L0 / L1 / L2)"), form, out);
}

export async function memoryDetailPage(root, id) {
  fill(root, h("p", {}, link("← memories", "memory")), h("h1", {}, "Memory ", h("code", {}, id)));
  let got;
  try {
    got = await api("GET", "/v1/memories/" + encodeURIComponent(id));
  } catch (e) {
    root.appendChild(errorBox(e));
    return;
  }
  const m = got.memory;
  const trust = h("div", { id: "memory-trust" }, trustBar(m.trust));
  const change = h("p", { id: "signal-result", role: "status" });
  const buttons = h("div", { class: "signals", role: "group", "aria-label": "signals" }, SIGNALS.map((s) => {
    const b = h("button", { type: "button", "data-signal": s }, s);
    b.addEventListener("click", async () => {
      const before = Number(trust.querySelector("meter").value);
      await guard(change, async () => {
        const after = await api("POST", "/v1/memories/" + encodeURIComponent(id) + "/signal", { signal: s });
        const d = after.trust - before;
        fill(trust, trustBar(after.trust));
        fill(uses, usesOf(after));
        fill(change, `${s}: trust ${num(before)} → ${num(after.trust)} (${d >= 0 ? "+" : ""}${num(d)})`);
        await showAudit(audit, id);
      });
    });
    return b;
  }));
  const audit = h("div", { id: "audit" });
  const uses = h("dd", { id: "memory-uses" }, usesOf(m));
  fill(root, h("p", {}, link("← memories", "memory")), h("h1", {}, "Memory ", h("code", {}, id)),
    h("blockquote", { class: "memory-text" }, m.text),
    h("dl", { class: "facts" },
      h("dt", {}, "Trust"), h("dd", {}, trust),
      h("dt", {}, "Kind"), h("dd", {}, m.kind),
      h("dt", {}, "Status"), h("dd", {}, m.status),
      h("dt", {}, "Scope"), h("dd", {}, Object.entries(m.scope || {}).filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(", ")),
      h("dt", {}, "Source"), h("dd", {}, m.source || "–"),
      h("dt", {}, "Created"), h("dd", {}, when(m.created_at_ms)),
      h("dt", {}, "Last used"), h("dd", {}, when(m.last_used_at_ms)),
      h("dt", {}, "Uses"), uses),
    h("h2", {}, "Signals"), buttons, change,
    h("h2", {}, "Relations"), relations(id, got.relations || []),
    h("h2", {}, "Audit"), audit);
  await showAudit(audit, id);
}

function usesOf(m) {
  return Object.entries(m.use_counts || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "none";
}

/** The edges around a memory; superseded and contradicting ones marked. */
function relations(id, rels) {
  if (!rels.length) return h("p", { class: "muted" }, "No relations.");
  const end = (x) => (x.startsWith("ent:") ? h("code", {}, x) : x === id ? h("strong", {}, "this") : link(x, "memory", x));
  return h("div", { class: "scroll" }, h("table", { id: "relations" },
    h("thead", {}, h("tr", {}, ["From", "Relation", "To", "Meaning", "By", "When"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, rels.map((r) => {
      let meaning = "", cls = "";
      if (r.kind === "SUPERSEDES") { meaning = r.to === id ? "this is superseded" : "supersedes the other"; cls = "superseded"; }
      else if (r.kind === "CONTRADICTS") { meaning = "contradicting"; cls = "contradicts"; }
      else if (r.kind === "PARTIAL_UPDATE") meaning = r.to === id ? "partly updated by the other" : "partly updates the other";
      else if (r.kind === "MENTIONS") meaning = "names an entity";
      return h("tr", { class: cls },
        h("td", {}, end(r.from)), h("td", {}, h("span", { class: "rel rel-" + r.kind.toLowerCase() }, r.kind)), h("td", {}, end(r.to)),
        h("td", {}, meaning), h("td", {}, r.by || ""), h("td", {}, when(r.at_ms)));
    }))));
}

async function showAudit(where, id) {
  await guard(where, async () => {
    const a = await api("GET", "/v1/memories/" + encodeURIComponent(id) + "/audit");
    fill(where, h("div", { class: "scroll" }, h("table", { id: "audit-table" },
      h("thead", {}, h("tr", {}, ["When", "Event", "Trust before", "Trust after", "By", "Note"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, a.audit.map((e) => h("tr", { "data-event": e.event },
        h("td", {}, when(e.at_ms)), h("td", {}, e.event), h("td", { class: "num" }, num(e.trust_before, 3)),
        h("td", { class: "num" }, num(e.trust_after, 3)), h("td", {}, e.by || ""), h("td", {}, e.note || "")))))));
  });
}
