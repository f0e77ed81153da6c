// Library: collections, their sources with provenance, uploads as jobs, documents with
// their chunks.
import { api, collPath, errorBox, field, fill, guard, h, link } from "./dom.js";

const FINISHED = ["indexed", "failed", "cancelled"];

export async function libraryPage(root, current) {
  const list = await api("GET", "/v1/collections");
  current = current || sessionStorage.getItem("neuralcore.collection") || (list.collections[0] && list.collections[0].name) || "default";
  sessionStorage.setItem("neuralcore.collection", current);

  const name = h("input", { id: "new-collection", name: "name", required: true, maxlength: 64, pattern: "[A-Za-z0-9_\\-][A-Za-z0-9_.\\-]*" });
  const create = h("form", { class: "inline", id: "create-collection" }, field("New collection", name), h("button", { type: "submit" }, "Create"));
  const createMsg = h("div", { role: "status" });
  create.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await guard(createMsg, async () => {
      await api("POST", "/v1/collections", { name: name.value.trim() });
      location.hash = "#/library/" + encodeURIComponent(name.value.trim());
    });
  });

  const rows = h("tbody", {});
  const table = h("table", { id: "collections" },
    h("thead", {}, h("tr", {}, ["Collection", "Sources", "Documents", "Chunks", "Created"].map((t) => h("th", { scope: "col" }, t)))),
    rows);
  const showCollections = (cols) => fill(rows, cols.map((c) => h("tr", { "aria-current": c.name === current ? "true" : null },
    h("td", {}, link(c.name, "library", c.name)), h("td", { class: "num" }, String(c.sources)),
    h("td", { class: "num" }, String(c.documents)), h("td", { class: "num" }, String(c.chunks)), h("td", {}, c.created_at))));
  showCollections(list.collections);

  // Uploads: a drop zone and a file input, both posting multipart to the collection.
  const input = h("input", { type: "file", id: "upload-input", class: "visually-hidden", multiple: true, accept: ".txt,.md,.markdown,.html,.htm,.pdf,.json,.jsonl,.csv,.tsv" });
  const drop = h("div", { class: "drop", id: "drop", tabindex: 0, role: "group", "aria-label": "Upload files" },
    h("p", {}, "Drop files here, or "), h("label", { for: "upload-input", class: "button" }, "choose files"), input,
    h("p", { class: "muted" }, "txt, md, html, pdf, json, jsonl, csv, tsv — each upload is a job."));
  const jobs = h("div", { id: "jobs", "aria-live": "polite" });
  const sources = h("div", { id: "sources" });
  const refresh = async () => {
    showCollections((await api("GET", "/v1/collections")).collections);
    await showSources(sources, current, refresh);
  };
  const upload = (files) => uploadFiles(current, files, jobs, refresh);
  input.addEventListener("change", () => { if (input.files.length) upload(Array.from(input.files)); input.value = ""; });
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer.files.length) upload(Array.from(e.dataTransfer.files));
  });
  drop.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); input.click(); } });

  const docId = h("input", { id: "open-doc", name: "doc", required: true, spellcheck: false });
  const open = h("form", { class: "inline", id: "open-doc-form" }, field("Open a document by id", docId), h("button", { type: "submit" }, "Open"));
  open.addEventListener("submit", (ev) => {
    ev.preventDefault();
    location.hash = "#/doc/" + encodeURIComponent(current) + "/" + encodeURIComponent(docId.value.trim());
  });

  fill(root, h("h1", {}, "Library"),
    h("div", { class: "scroll" }, table), create, createMsg,
    h("h2", {}, "Collection ", h("code", {}, current)),
    drop, jobs, open, sources);
  if (list.collections.some((c) => c.name === current)) await showSources(sources, current, refresh);
  else fill(sources, h("p", {}, "No collection ", h("code", {}, current), " yet: create it above, or upload a file to create it."));
}

async function uploadFiles(collection, files, jobs, refresh) {
  const row = h("div", { class: "job" });
  jobs.prepend(row);
  await guard(row, async () => {
    const form = new FormData();
    for (const f of files) form.append("file", f, f.name);
    let job = await api("POST", collPath(collection, "documents"), form);
    const progress = h("progress", { max: 1, value: 0, "aria-label": "files done" });
    const state = h("span", { class: "job-state" });
    const detail = h("span", { class: "muted" });
    fill(row, h("strong", {}, files.map((f) => f.name).join(", ")), " ", progress, " ", state, " ", detail);
    row.dataset.job = job.id;
    for (;;) {
      const c = job.counts;
      progress.max = Math.max(1, c.files);
      progress.value = c.files_done;
      state.textContent = job.state;
      state.dataset.state = job.state;
      detail.textContent = ` ${c.files_done}/${c.files} files, ${c.documents} documents, ${c.chunks} chunks` +
        (job.errors.length ? "; errors: " + job.errors.map((e) => `${e.file}: ${e.message}`).join("; ") : "") +
        (job.error ? "; " + job.error : "");
      if (FINISHED.includes(job.state)) break;
      await new Promise((r) => setTimeout(r, 250));
      job = await api("GET", "/v1/jobs/" + encodeURIComponent(job.id));
    }
    row.dataset.done = job.state;
    await refresh();
  });
}

async function showSources(where, collection, refresh) {
  await guard(where, async () => {
    let list;
    try {
      list = await api("GET", collPath(collection, "sources"));
    } catch (e) {
      if (e.status === 404) { fill(where, h("p", {}, "No collection ", h("code", {}, collection), " yet: upload a file to create it.")); return; }
      throw e;
    }
    const rows = list.sources.map((s) => {
      const del = h("button", { type: "button", class: "danger", "aria-label": "delete source " + s.id }, "Delete");
      del.addEventListener("click", async () => {
        if (!window.confirm(`Delete ${s.id} and the documents only it holds?`)) return;
        await guard(where, async () => {
          await api("DELETE", collPath(collection, "sources", s.id));
          await (refresh ? refresh() : showSources(where, collection));
        });
      });
      return h("tr", {},
        h("td", {}, h("code", {}, s.id)), h("td", {}, s.loader), h("td", { class: "num" }, String(s.byte_size)),
        h("td", {}, h("ul", { class: "plain" }, s.documents.map((d) => h("li", {}, link(d, "doc", collection, d))))),
        h("td", {}, s.ingested_at), h("td", { class: "sha", title: s.raw_sha256 }, s.raw_sha256.slice(0, 12) + "…"), h("td", {}, del));
    });
    fill(where, h("h3", {}, `Sources (${list.sources.length})`),
      list.sources.length ? h("div", { class: "scroll" }, h("table", { id: "sources-table" },
        h("thead", {}, h("tr", {}, ["Source", "Loader", "Bytes", "Documents", "Ingested", "SHA-256", ""].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows))) : h("p", {}, "No sources yet."));
  });
}

/** A document: its metadata, provenance and chunks (the first 100). */
export async function documentPage(root, collection, id) {
  fill(root, h("p", {}, link("← " + collection, "library", collection)), h("h1", {}, "Document ", h("code", {}, id)));
  let doc;
  try {
    doc = await api("GET", collPath(collection, "documents", id));
  } catch (e) {
    root.appendChild(errorBox(e));
    return;
  }
  root.appendChild(h("dl", { class: "facts", id: "doc-facts" },
    h("dt", {}, "Title"), h("dd", {}, doc.title || "–"),
    h("dt", {}, "Characters"), h("dd", {}, String(doc.char_len)),
    h("dt", {}, "Chunks"), h("dd", {}, String(doc.n_chunks), doc.chunking ? ` (${doc.chunking})` : ""),
    h("dt", {}, "SHA-256"), h("dd", {}, h("code", {}, doc.content_sha256)),
    h("dt", {}, "Metadata"), h("dd", {}, h("pre", { class: "json" }, JSON.stringify(doc.metadata, null, 2)))));
  root.appendChild(h("h2", {}, "Provenance"));
  root.appendChild(h("ul", { class: "provenance" }, (doc.provenance || []).map((p) =>
    h("li", {}, h("code", {}, p.source_id), ` — ${p.loader}, ${p.byte_size} bytes, ingested ${p.ingested_at}`, p.locator ? `, ${p.locator}` : ""))));
  const chunks = h("ol", { class: "chunks", id: "chunks", start: 0 });
  root.appendChild(h("h2", {}, "Chunks"));
  root.appendChild(chunks);
  for (let n = 0; n < Math.min(doc.n_chunks, 100); n++) {
    const li = chunks.appendChild(h("li", { value: n }));
    await guard(li, async () => {
      const c = await api("GET", collPath(collection, "documents", id, "chunks", String(n)));
      fill(li, h("p", { class: "muted" }, `chars ${c.span[0]}–${c.span[1]}, ${c.tokens} tokens`, c.section && c.section.length ? " — " + c.section.join(" › ") : ""),
        h("pre", { class: "doc-text" }, c.text));
    });
  }
  if (doc.n_chunks > 100) root.appendChild(h("p", { class: "muted" }, `${doc.n_chunks - 100} more chunks not shown.`));
}

