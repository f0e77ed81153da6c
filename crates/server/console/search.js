// Search: keyword, vector and hybrid side by side for one query (three POST /v1/search).
import { api, collectionSelect, field, fill, guard, h, link, num } from "./dom.js";

const MODES = ["keyword", "vector", "hybrid"];

export async function searchPage(root) {
  const query = h("input", { id: "search-query", name: "query", type: "search", required: true, maxlength: 4096 });
  const collection = await collectionSelect("search-collection");
  const k = h("input", { id: "search-k", name: "k", type: "number", min: 1, max: 1000, value: 5 });
  const form = h("form", { id: "search-form", class: "search-form" },
    field("Query", query), h("div", { class: "row" }, field("Collection", collection), field("Results per mode", k)),
    h("button", { type: "submit" }, "Search"));
  const cols = h("div", { class: "columns three", id: "search-results" });
  fill(root, h("h1", {}, "Search"), form, cols);
  query.focus();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    fill(cols);
    await Promise.all(MODES.map(async (mode) => {
      const col = cols.appendChild(h("section", { class: "mode", "data-mode": mode, "aria-label": mode }, h("h2", {}, mode), h("p", { class: "muted" }, "Searching…")));
      await guard(col, async () => {
        const t0 = performance.now();
        const res = await api("POST", "/v1/search", { query: query.value, collection: collection.value, mode, k: Number(k.value) || 5 });
        const ms = performance.now() - t0;
        fill(col, h("h2", {}, mode),
          h("p", { class: "muted" }, `${res.hits.length} hits in ${ms.toFixed(0)} ms`, res.fallback ? ` — ran ${res.mode}: ${res.fallback}` : ""),
          h("ol", { class: "hits" }, res.hits.map((hit) => h("li", { class: "hit" },
            h("div", { class: "hit-head" }, h("span", { class: "score" }, num(hit.score, 3)), " ",
              link(hit.title || hit.doc_id, "doc", res.collection, hit.doc_id), h("span", { class: "muted" }, ` #${hit.ordinal}`)),
            hit.section && hit.section.length ? h("div", { class: "muted" }, hit.section.join(" › ")) : "",
            h("p", { class: "snippet" }, hit.text.length > 300 ? hit.text.slice(0, 300) + "…" : hit.text),
            h("div", { class: "muted small" }, hit.path || "", hit.span ? ` chars ${hit.span[0]}–${hit.span[1]}` : "")))));
      });
    }));
  });
}
