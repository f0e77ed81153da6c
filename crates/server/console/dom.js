// Shared helpers of the console: building DOM safely, calling the API.
//
// Documents, memories and answers are untrusted: everything here builds nodes with
// createElement and textContent, never innerHTML, so markup in data shows as text.

const KEY = "neuralcore.key";

/** The key of this tab ("" on a server without keys). */
export function apiKey() {
  return sessionStorage.getItem(KEY);
}

export function setApiKey(key) {
  if (key === null) sessionStorage.removeItem(KEY);
  else sessionStorage.setItem(KEY, key);
}

/**
 * An element: h("a", {href: "#/x", class: "c"}, "text", child, ...). Attributes are
 * set with setAttribute (no event handlers: names starting with "on" are refused);
 * strings become text nodes; null/false children are skipped; arrays are flattened.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.toLowerCase().startsWith("on")) throw new Error("no inline handlers");
    if (k === "href" && !String(v).startsWith("#")) throw new Error("hash links only");
    el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** Replace the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A hash link to a page of the console; each part percent-encoded. */
export function link(text, ...parts) {
  return h("a", { href: "#/" + parts.map(encodeURIComponent).join("/") }, text);
}

/** An error of the API: `status` and the problem's `detail`. */
export class ApiError extends Error {
  constructor(status, title, detail) {
    super(detail || title || `HTTP ${status}`);
    this.status = status;
    this.title = title;
  }
}

/** Headers of an API call: the key, when there is one. */
export function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const key = apiKey();
  if (key) headers["Authorization"] = "Bearer " + key;
  return headers;
}

/** Throws an ApiError for a response that is not 2xx (reading its problem body). */
export async function check(res) {
  if (res.ok) return res;
  let title = res.statusText, detail = "";
  try {
    const p = await res.json();
    title = p.title || title;
    detail = p.detail || "";
  } catch (_) { /* not a problem body */ }
  const err = new ApiError(res.status, title, detail);
  if (res.status === 401) window.dispatchEvent(new CustomEvent("nc-unauthorized"));
  throw err;
}

/** Call the API: JSON in, JSON out (null for 204). */
export async function api(method, path, body) {
  const opts = { method, headers: authHeaders({ Accept: "application/json" }) };
  if (body instanceof FormData) opts.body = body;
  else if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await check(await fetch(path, opts));
  if (res.status === 204) return null;
  return res.json();
}

/** `/v1/collections/{c}/...` with each part percent-encoded. */
export function collPath(collection, ...rest) {
  return ["/v1/collections", collection, ...rest].map((p, i) => (i ? encodeURIComponent(p) : p)).join("/");
}

/** A box saying what went wrong (an alert for screen readers). */
export function errorBox(err) {
  const status = err instanceof ApiError ? err.status : null;
  const title = status === 404 ? "Not found" : status ? `${err.title || "Error"} (${status})` : "Error";
  return h("div", { class: "error", role: "alert" }, h("strong", {}, title + ": "), err.message);
}

/** Run `f` and show its error in `where` instead of throwing. */
export async function guard(where, f) {
  try {
    return await f();
  } catch (e) {
    fill(where, errorBox(e));
    return undefined;
  }
}

/** A number with `d` decimals, or "–". */
export function num(x, d = 2) {
  return typeof x === "number" && isFinite(x) ? x.toFixed(d) : "–";
}

/** A labelled field: label + control. */
export function field(label, control) {
  if (!control.id) control.id = "f-" + Math.random().toString(36).slice(2, 9);
  return h("div", { class: "field" }, h("label", { for: control.id }, label), control);
}

/** A checkbox with its label after it. */
export function checkbox(label, name, checked) {
  const id = "c-" + name + "-" + Math.random().toString(36).slice(2, 7);
  const input = h("input", { type: "checkbox", id, name, checked: !!checked });
  return h("div", { class: "check" }, input, h("label", { for: id }, label));
}

/** The collections of the tenant, for a <select>; "default" when there are none. */
export async function collectionNames() {
  const list = await api("GET", "/v1/collections");
  const names = list.collections.map((c) => c.name);
  return names.length ? names : ["default"];
}

/** A <select> of collections, `selected` chosen (remembered across pages). */
export async function collectionSelect(id) {
  const names = await collectionNames();
  const last = sessionStorage.getItem("neuralcore.collection");
  const sel = h("select", { id, name: "collection" });
  for (const n of names) sel.appendChild(h("option", { value: n, selected: n === last }, n));
  sel.addEventListener("change", () => sessionStorage.setItem("neuralcore.collection", sel.value));
  return sel;
}

/** A trust bar: a <meter> and its value. */
export function trustBar(trust) {
  return h("span", { class: "trust" },
    h("meter", { min: 0, max: 1, low: 0.3, high: 0.7, optimum: 1, value: trust, "aria-label": "trust" }),
    h("span", { class: "trust-value" }, num(trust)));
}

/** Milliseconds since the epoch as a local date and time. */
export function when(ms) {
  return typeof ms === "number" ? new Date(ms).toLocaleString() : "–";
}
