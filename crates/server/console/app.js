// The console's shell: sign-in, the nav bar and hash routing to each page's module.
import { api, apiKey, setApiKey, fill, errorBox } from "./dom.js";
import { askPage } from "./ask.js";
import { libraryPage, documentPage } from "./library.js";
import { searchPage } from "./search.js";
import { memoryPage, memoryDetailPage } from "./memory.js";
import { runsPage } from "./runs.js";

const $ = (id) => document.getElementById(id);

/** Page modules by the first part of the hash: each gets (root, ...rest of the hash). */
const PAGES = {
  ask: askPage,
  library: libraryPage,
  doc: documentPage,
  search: searchPage,
  memory: (root, id) => (id ? memoryDetailPage(root, id) : memoryPage(root)),
  runs: runsPage,
};

function showSignin(message) {
  $("top").hidden = true;
  fill($("page"));
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("key").focus();
}

/** Whether the key of this tab (or none) is accepted: a read call that any key may make. */
async function tryKey() {
  await api("GET", "/v1/collections");
}

async function signin(ev) {
  ev.preventDefault();
  const key = $("key").value.trim();
  setApiKey(key);
  try {
    await tryKey();
  } catch (e) {
    setApiKey(null);
    showSignin(e.status === 401 ? "This key is not accepted (unknown, revoked or mistyped)." : e.message);
    return;
  }
  $("key").value = "";
  start();
}

function start() {
  $("signin").hidden = true;
  $("top").hidden = false;
  const key = apiKey();
  $("who").textContent = key ? "key " + key.slice(0, 12) + "…" : "no key (server without keys)";
  if (!location.hash || location.hash === "#" || location.hash === "#/") location.hash = "#/ask";
  else route();
}

let routing = 0;

/** A part of the hash, percent-decoded (as typed when it is not valid encoding). */
function decode(part) {
  try {
    return decodeURIComponent(part);
  } catch (_) {
    return part;
  }
}

async function route() {
  if (apiKey() === null) return;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decode);
  const name = PAGES[parts[0]] ? parts[0] : "ask";
  for (const a of document.querySelectorAll("nav a")) {
    const here = a.dataset.page === name || (name === "doc" && a.dataset.page === "library");
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const root = fill($("page"));
  const mine = ++routing;
  root.dataset.page = name;
  document.title = name[0].toUpperCase() + name.slice(1) + " — neuralcore console";
  try {
    await PAGES[name](root, ...parts.slice(1));
  } catch (e) {
    if (mine === routing) root.appendChild(errorBox(e));
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("nc-unauthorized", () => {
  setApiKey(null);
  showSignin("Your key was refused: sign in again.");
});

// A module runs once the document is parsed: the elements are there.
$("signin-form").addEventListener("submit", signin);
$("signout").addEventListener("click", () => {
  setApiKey(null);
  showSignin("");
});
if (apiKey() !== null) start();
else showSignin("");
