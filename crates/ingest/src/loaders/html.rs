//! HTML loader: the page's main text, with headings as section marks.
//!
//! The page is parsed by a small, forgiving tree builder rather than `tl`: `tl` ignores a
//! closing tag that does not match the innermost open element, so one unclosed `<li>`
//! inside `<nav>` (or a `<` inside a `<script>`) pulls the rest of the page into an
//! element that is skipped. This builder applies the implied-end-tag rules of HTML that
//! matter for text (`<p>`, `<li>`, `<dt>`/`<dd>`, table rows and cells, `<option>`, the
//! head), closes elements up to the matching open one, treats the contents of `script`,
//! `style`, `textarea`, `title`... as raw text, and caps nesting depth so broken pages
//! cannot exhaust the stack. Entities are decoded with `html-escape`.

use std::collections::BTreeMap;

use neuralcore_core::text::DocBuilder;

use super::{read_text, LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput};

/// Reads `.html`, `.htm` and `.xhtml` files.
pub struct HtmlLoader;

impl Loader for HtmlLoader {
    fn name(&self) -> &'static str {
        "html"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["html", "htm", "xhtml"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let source = read_text(input.path, input.options.max_file_bytes, &mut report)?;
        let doc = html_to_doc(&source, input.default_title)?;
        sink(doc)?;
        Ok(report)
    }
}

/// Turn an HTML page (already decoded to text) into its title and main text, cleaned as
/// the HTML loader cleans files: scripts, styles, navigation and hidden parts removed,
/// paragraphs separated by blank lines, text normalized. The title is the page's
/// `<title>`, else its first `<h1>`, else `default_title`.
///
/// Used for pages that come from elsewhere than a file (web search results, say).
/// Fails with [`LoadError::Empty`] when the page holds no text.
pub fn html_to_text(source: &str, default_title: &str) -> Result<(String, String), LoadError> {
    let doc = html_to_doc(source, default_title)?;
    Ok((doc.title, doc.text))
}

/// Turn an HTML page into one document.
fn html_to_doc(source: &str, default_title: &str) -> Result<LoadedDoc, LoadError> {
    let root = parse(source);

    let (text, sections) = extract_main(&root).doc.finish();
    if text.is_empty() {
        return Err(LoadError::Empty);
    }

    let title = find_first(&root, &|e| e.name == "title")
        .map(|e| inline_text(e, true))
        .filter(|t| !t.is_empty())
        .or_else(|| {
            find_first(&root, &|e| e.name == "h1")
                .map(|e| inline_text(e, false))
                .filter(|t| !t.is_empty())
        })
        .unwrap_or_else(|| default_title.to_owned());

    let mut metadata = BTreeMap::new();
    if let Some(description) = meta_description(&root) {
        metadata.insert(
            "description".to_owned(),
            serde_json::Value::String(description),
        );
    }

    Ok(LoadedDoc {
        title,
        text,
        sections,
        metadata,
        external_id: None,
        locator: None,
    })
}

// ---------------------------------------------------------------------------------------
// Tree

#[derive(Debug)]
enum Node {
    Element(Element),
    Text(String),
}

#[derive(Debug)]
struct Element {
    /// Lowercase tag name (`#root` for the document).
    name: String,
    /// Lowercase attribute names with entity-decoded values.
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
}

impl Element {
    fn new(name: &str, attrs: Vec<(String, String)>) -> Self {
        Element {
            name: name.to_owned(),
            attrs,
            children: Vec::new(),
        }
    }

    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn children_elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }
}

/// Deeper elements become siblings instead of children (bounds recursion).
const MAX_DEPTH: usize = 256;

const VOID: &[&str] = &[
    "area", "base", "basefont", "bgsound", "br", "col", "command", "embed", "frame", "hr", "img",
    "input", "keygen", "link", "meta", "param", "source", "track", "wbr",
];

/// Elements whose content is raw text up to the matching end tag.
const RAW_TEXT: &[&str] = &[
    "script",
    "style",
    "textarea",
    "title",
    "xmp",
    "iframe",
    "noembed",
    "noframes",
    "noscript",
    "plaintext",
];

/// Elements that may appear in `<head>`; any other start tag closes an open head.
const HEAD_CONTENT: &[&str] = &[
    "base", "basefont", "bgsound", "link", "meta", "noscript", "script", "style", "template",
    "title", "head",
];

/// Start tags that close an open `<p>`.
const CLOSES_P: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "li",
    "dd",
    "dt",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "summary",
    "table",
    "ul",
];

/// Elements that bound the search for an element to close implicitly.
const SCOPE: &[&str] = &[
    "#root", "html", "body", "table", "td", "th", "caption", "button", "object", "marquee",
    "template", "applet",
];

fn is_heading(name: &str) -> bool {
    matches!(name, "h1" | "h2" | "h3" | "h4" | "h5" | "h6")
}

/// Builds the tree with a stack of open elements.
struct TreeBuilder {
    stack: Vec<Element>,
}

impl TreeBuilder {
    fn new() -> Self {
        TreeBuilder {
            stack: vec![Element::new("#root", Vec::new())],
        }
    }

    fn top(&mut self) -> &mut Element {
        self.stack.last_mut().expect("root is never popped")
    }

    fn text(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let decoded = html_escape::decode_html_entities(raw).into_owned();
        let top = self.top();
        if let Some(Node::Text(t)) = top.children.last_mut() {
            t.push_str(&decoded);
        } else {
            top.children.push(Node::Text(decoded));
        }
    }

    /// Pop the innermost element (not the root) into its parent.
    fn pop(&mut self) {
        if self.stack.len() > 1 {
            let e = self.stack.pop().expect("checked length");
            self.top().children.push(Node::Element(e));
        }
    }

    /// Index of the innermost open element named one of `names`, searching down to the
    /// first element named one of `bounds`.
    fn find_open(&self, names: &[&str], bounds: &[&str]) -> Option<usize> {
        for (i, e) in self.stack.iter().enumerate().rev() {
            if names.contains(&e.name.as_str()) {
                return Some(i);
            }
            if bounds.contains(&e.name.as_str()) {
                return None;
            }
        }
        None
    }

    fn close_to(&mut self, index: usize) {
        while self.stack.len() > index.max(1) {
            self.pop();
        }
    }

    fn close_open(&mut self, names: &[&str], bounds: &[&str]) {
        if let Some(i) = self.find_open(names, bounds) {
            self.close_to(i);
        }
    }

    fn start(&mut self, name: &str, attrs: Vec<(String, String)>, self_closing: bool) {
        if !HEAD_CONTENT.contains(&name) {
            if let Some(i) = self.find_open(&["head"], &[]) {
                self.close_to(i);
            }
        }
        if CLOSES_P.contains(&name) {
            self.close_open(&["p"], SCOPE);
        }
        match name {
            "li" => self.close_open(&["li"], &["ul", "ol", "menu", "dir", "#root", "table"]),
            "dt" | "dd" => self.close_open(&["dt", "dd"], &["dl", "#root", "table"]),
            "tr" => self.close_open(&["tr"], &["table", "#root"]),
            "td" | "th" => self.close_open(&["td", "th"], &["tr", "table", "#root"]),
            "thead" | "tbody" | "tfoot" => {
                self.close_open(&["thead", "tbody", "tfoot"], &["table", "#root"])
            }
            "option" => self.close_open(&["option"], &["select", "datalist", "#root"]),
            "optgroup" => {
                self.close_open(&["option", "optgroup"], &["select", "datalist", "#root"])
            }
            n if is_heading(n) => {
                let top = self.stack.last().map(|e| e.name.as_str()).unwrap_or("");
                if is_heading(top) {
                    self.pop();
                }
            }
            _ => {}
        }
        let element = Element::new(name, attrs);
        if self_closing || VOID.contains(&name) || self.stack.len() > MAX_DEPTH {
            self.top().children.push(Node::Element(element));
        } else {
            self.stack.push(element);
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            // Content after `</body>` or `</html>` still belongs to the body.
            "body" | "html" => {}
            "br" => self.start("br", Vec::new(), true),
            _ => {
                if let Some(i) = self.find_open(&[name], &[]) {
                    if i > 0 {
                        self.close_to(i);
                    }
                }
            }
        }
    }

    fn finish(mut self) -> Element {
        while self.stack.len() > 1 {
            self.pop();
        }
        self.stack.pop().expect("root")
    }
}

/// Parse HTML into a tree rooted at a `#root` element.
fn parse(src: &str) -> Element {
    let bytes = src.as_bytes();
    let mut tb = TreeBuilder::new();
    let mut pos = 0;
    let mut text_start = 0;
    while pos < bytes.len() {
        let Some(off) = memchr(b'<', &bytes[pos..]) else {
            break;
        };
        let lt = pos + off;
        let next = bytes.get(lt + 1).copied().unwrap_or(0);
        if src[lt..].starts_with("<!--") {
            tb.text(&src[text_start..lt]);
            pos = find_from(src, lt + 4, "-->").map_or(bytes.len(), |i| i + 3);
            text_start = pos;
        } else if src[lt..].starts_with("<![CDATA[") {
            tb.text(&src[text_start..lt]);
            let body_start = lt + 9;
            let end = find_from(src, body_start, "]]>").unwrap_or(bytes.len());
            // CDATA content is literal: escape nothing, so bypass entity decoding.
            let literal = src[body_start..end].replace('&', "&amp;");
            tb.text(&literal);
            pos = (end + 3).min(bytes.len());
            text_start = pos;
        } else if next == b'!' || next == b'?' {
            tb.text(&src[text_start..lt]);
            pos = memchr(b'>', &bytes[lt..]).map_or(bytes.len(), |i| lt + i + 1);
            text_start = pos;
        } else if next == b'/' && bytes.get(lt + 2).is_some_and(u8::is_ascii_alphabetic) {
            tb.text(&src[text_start..lt]);
            let (name, after_name) = read_name(src, lt + 2);
            pos = memchr(b'>', &bytes[after_name..]).map_or(bytes.len(), |i| after_name + i + 1);
            text_start = pos;
            tb.end(&name);
        } else if next.is_ascii_alphabetic() {
            tb.text(&src[text_start..lt]);
            let (name, after_name) = read_name(src, lt + 1);
            let (attrs, self_closing, after_tag) = read_attrs(src, after_name);
            pos = after_tag;
            text_start = pos;
            if RAW_TEXT.contains(&name.as_str()) && !self_closing {
                let end = if name == "plaintext" {
                    None
                } else {
                    find_end_tag(src, pos, &name)
                };
                let (content_end, resume) = end.unwrap_or((bytes.len(), bytes.len()));
                let mut element = Element::new(&name, attrs);
                let content = &src[pos..content_end];
                if !content.is_empty() {
                    let content = if matches!(name.as_str(), "title" | "textarea") {
                        html_escape::decode_html_entities(content).into_owned()
                    } else {
                        content.to_owned()
                    };
                    element.children.push(Node::Text(content));
                }
                // Run the implied-end rules, then attach without pushing.
                tb.start(&name, Vec::new(), true);
                if let Some(Node::Element(e)) = tb.top().children.last_mut() {
                    *e = element;
                }
                pos = resume;
                text_start = pos;
            } else {
                tb.start(&name, attrs, self_closing);
            }
        } else {
            // A `<` that starts no tag is text.
            pos = lt + 1;
        }
    }
    tb.text(&src[text_start..]);
    tb.finish()
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

fn find_from(src: &str, from: usize, needle: &str) -> Option<usize> {
    src.get(from..)?.find(needle).map(|i| from + i)
}

/// Read a tag or attribute name starting at `from`; returns it lowercased and the
/// position after it.
fn read_name(src: &str, from: usize) -> (String, usize) {
    let bytes = src.as_bytes();
    let mut end = from;
    while end < bytes.len()
        && !matches!(
            bytes[end],
            b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>'
        )
    {
        end += 1;
    }
    (src[from..end].to_ascii_lowercase(), end)
}

/// Read attributes up to and including the closing `>`.
fn read_attrs(src: &str, mut pos: usize) -> (Vec<(String, String)>, bool, usize) {
    let bytes = src.as_bytes();
    let mut attrs = Vec::new();
    let mut self_closing = false;
    loop {
        while pos < bytes.len() && (bytes[pos].is_ascii_whitespace() || bytes[pos] == b'/') {
            self_closing = bytes[pos] == b'/';
            pos += 1;
        }
        if pos >= bytes.len() {
            return (attrs, self_closing, pos);
        }
        if bytes[pos] == b'>' {
            return (attrs, self_closing, pos + 1);
        }
        self_closing = false;
        let start = pos;
        while pos < bytes.len()
            && !matches!(
                bytes[pos],
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' | b'/' | b'>' | b'='
            )
        {
            pos += 1;
        }
        // A lone `=` (or other oddity) would otherwise loop forever.
        if pos == start {
            pos += 1;
        }
        let name = src[start..pos].to_ascii_lowercase();
        while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
            pos += 1;
        }
        let mut value = String::new();
        if bytes.get(pos) == Some(&b'=') {
            pos += 1;
            while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
                pos += 1;
            }
            match bytes.get(pos) {
                Some(&q) if q == b'"' || q == b'\'' => {
                    let vstart = pos + 1;
                    let vend = memchr(q, &bytes[vstart..]).map_or(bytes.len(), |i| vstart + i);
                    value = html_escape::decode_html_entities(&src[vstart..vend]).into_owned();
                    pos = (vend + 1).min(bytes.len());
                }
                _ => {
                    let vstart = pos;
                    while pos < bytes.len()
                        && !bytes[pos].is_ascii_whitespace()
                        && bytes[pos] != b'>'
                    {
                        pos += 1;
                    }
                    value = html_escape::decode_html_entities(&src[vstart..pos]).into_owned();
                }
            }
        }
        if !name.is_empty() && name != "=" {
            attrs.push((name, value));
        }
    }
}

/// Find `</name` (any case) followed by a delimiter, from `from`; returns where the
/// content ends and where parsing resumes (after the end tag's `>`).
fn find_end_tag(src: &str, from: usize, name: &str) -> Option<(usize, usize)> {
    let bytes = src.as_bytes();
    let mut pos = from;
    while let Some(off) = memchr(b'<', &bytes[pos..]) {
        let lt = pos + off;
        let name_start = lt + 2;
        let name_end = name_start + name.len();
        if bytes.get(lt + 1) == Some(&b'/')
            && name_end <= bytes.len()
            && bytes[name_start..name_end].eq_ignore_ascii_case(name.as_bytes())
            && bytes
                .get(name_end)
                .is_none_or(|b| b.is_ascii_whitespace() || *b == b'>' || *b == b'/')
        {
            let resume = memchr(b'>', &bytes[name_end..]).map_or(bytes.len(), |i| name_end + i + 1);
            return Some((lt, resume));
        }
        pos = lt + 1;
    }
    None
}

// ---------------------------------------------------------------------------------------
// Queries

/// Elements never part of the main text.
const SKIP: &[&str] = &[
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "math",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "iframe",
    "button",
    "select",
    "datalist",
    "textarea",
    "head",
    "title",
    "object",
    "embed",
    "canvas",
    "audio",
    "video",
    "xmp",
    "noembed",
    "noframes",
    "plaintext",
];

/// ARIA landmarks that are not content.
const SKIP_ROLES: &[&str] = &["navigation", "search", "complementary", "contentinfo"];

fn is_hidden(e: &Element) -> bool {
    if e.attr("hidden").is_some() {
        return true;
    }
    if e.attr("aria-hidden")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return true;
    }
    if let Some(style) = e.attr("style") {
        let style: String = style
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect::<String>()
            .to_ascii_lowercase();
        if style.contains("display:none") || style.contains("visibility:hidden") {
            return true;
        }
    }
    false
}

fn has_role(e: &Element, roles: &[&str]) -> bool {
    e.attr("role").is_some_and(|r| {
        r.split_ascii_whitespace()
            .any(|r| roles.iter().any(|x| r.eq_ignore_ascii_case(x)))
    })
}

/// Whether an element's subtree is left out of the text. A `<header>` inside the main
/// content (an article's header, holding its title) is kept; page banners are not.
fn is_skipped(e: &Element, in_content: bool) -> bool {
    if e.name == "header" && in_content {
        return is_hidden(e);
    }
    SKIP.contains(&e.name.as_str()) || is_hidden(e) || has_role(e, SKIP_ROLES)
}

/// First element (document order) matching `pred`, not looking inside `svg`/`math`
/// (whose `<title>` is not the page's).
fn find_first<'a>(e: &'a Element, pred: &dyn Fn(&Element) -> bool) -> Option<&'a Element> {
    for child in e.children_elements() {
        if pred(child) {
            return Some(child);
        }
        if child.name == "svg" || child.name == "math" {
            continue;
        }
        if let Some(found) = find_first(child, pred) {
            return Some(found);
        }
    }
    None
}

/// Outermost elements matching `pred`, in document order, not looking inside skipped
/// elements.
fn find_outermost<'a>(e: &'a Element, pred: &dyn Fn(&Element) -> bool, out: &mut Vec<&'a Element>) {
    for child in e.children_elements() {
        if pred(child) {
            out.push(child);
        } else if !is_skipped(child, false) {
            find_outermost(child, pred, out);
        }
    }
}

fn meta_description(root: &Element) -> Option<String> {
    let by = |attr: &'static str, value: &'static str| {
        move |e: &Element| {
            e.name == "meta"
                && e.attr(attr)
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case(value))
        }
    };
    [by("name", "description"), by("property", "og:description")]
        .iter()
        .filter_map(|pred| find_first(root, pred))
        .filter_map(|e| e.attr("content"))
        .map(collapse_ws)
        .find(|d| !d.is_empty())
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Text of an element's subtree on one line (skipping hidden parts unless `raw`).
fn inline_text(e: &Element, raw: bool) -> String {
    fn walk(e: &Element, raw: bool, out: &mut String) {
        for child in &e.children {
            match child {
                Node::Text(t) => {
                    out.push(' ');
                    out.push_str(t);
                }
                Node::Element(c) => {
                    if raw || !is_skipped(c, true) {
                        walk(c, raw, out);
                    }
                }
            }
        }
    }
    let mut out = String::new();
    walk(e, raw, &mut out);
    collapse_ws(&out)
}

// ---------------------------------------------------------------------------------------
// Extraction

/// Blocks set off by blank lines.
const PARAGRAPH_BLOCKS: &[&str] = &[
    "p",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "pre",
    "blockquote",
    "table",
    "ul",
    "ol",
    "dl",
    "menu",
    "section",
    "article",
    "main",
    "figure",
    "hr",
    "address",
    "details",
    "fieldset",
    "hgroup",
    "center",
    "listing",
];

/// Blocks that start a new line.
const LINE_BLOCKS: &[&str] = &[
    "div",
    "li",
    "tr",
    "dd",
    "dt",
    "caption",
    "figcaption",
    "summary",
    "legend",
    "option",
    "tbody",
    "thead",
    "tfoot",
    "body",
    "html",
    "dialog",
    "header",
    "search",
    "colgroup",
];

struct Extractor {
    doc: DocBuilder,
    /// Current line, white space collapsed.
    line: String,
    /// Separator owed before the next visible character (`" "`, `" | "` or none).
    pending: &'static str,
    /// Inside `<main>` / `<article>`, where a `<header>` is content.
    in_content: bool,
    /// Depth of `<pre>` elements around the current node.
    pre: usize,
    /// Open headings: (level, text).
    headings: Vec<(usize, String)>,
}

impl Extractor {
    fn new(in_content: bool) -> Self {
        Extractor {
            doc: DocBuilder::new(),
            line: String::new(),
            pending: "",
            in_content,
            pre: 0,
            headings: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.doc.is_empty() && self.line.is_empty()
    }

    fn flush(&mut self) {
        if !self.line.is_empty() {
            self.doc.push_line(&self.line);
            self.line.clear();
        }
        self.pending = "";
    }

    fn text(&mut self, t: &str) {
        if self.pre > 0 {
            let mut parts = t.split('\n');
            if let Some(first) = parts.next() {
                self.line.push_str(first);
            }
            for part in parts {
                // Keep blank lines inside preformatted text.
                let line = std::mem::take(&mut self.line);
                self.doc.push_line(&line);
                self.line.push_str(part);
            }
            return;
        }
        for c in t.chars() {
            if c.is_whitespace() {
                if !self.line.is_empty() && self.pending.is_empty() {
                    self.pending = " ";
                }
            } else {
                self.line.push_str(self.pending);
                self.pending = "";
                self.line.push(c);
            }
        }
    }

    fn element(&mut self, e: &Element) {
        if is_skipped(e, self.in_content) {
            return;
        }
        let name = e.name.as_str();
        match name {
            "br" => {
                if self.line.is_empty() {
                    // A second `<br>` in a row makes a paragraph break.
                    self.doc.push_line("");
                } else {
                    self.flush();
                }
                return;
            }
            // Cells of a row are set apart on its line.
            "td" | "th" if !self.line.is_empty() => self.pending = " | ",
            _ => {}
        }
        let paragraph = PARAGRAPH_BLOCKS.contains(&name);
        let block = paragraph || LINE_BLOCKS.contains(&name);
        if block {
            self.flush();
        }
        if paragraph {
            self.doc.end_paragraph();
        }
        if is_heading(name) {
            let level = usize::from(name.as_bytes()[1] - b'0');
            let title = inline_text(e, false);
            if !title.is_empty() {
                self.headings.retain(|(l, _)| *l < level);
                self.headings.push((level, title));
                self.doc
                    .mark_section(self.headings.iter().map(|(_, t)| t.clone()).collect());
            }
        }
        let pre = matches!(name, "pre" | "listing" | "textarea");
        if pre {
            self.pre += 1;
        }
        let was_in_content = self.in_content;
        if name == "main" || name == "article" || has_role(e, &["main"]) {
            self.in_content = true;
        }
        for (i, child) in e.children.iter().enumerate() {
            match child {
                Node::Text(t) => {
                    // A newline right after `<pre>` is not content.
                    let t = if pre && i == 0 {
                        t.strip_prefix("\r\n")
                            .or_else(|| t.strip_prefix('\n'))
                            .unwrap_or(t)
                    } else {
                        t
                    };
                    self.text(t);
                }
                Node::Element(c) => self.element(c),
            }
        }
        if pre {
            self.pre -= 1;
        }
        self.in_content = was_in_content;
        if block {
            self.flush();
        }
        if paragraph {
            self.doc.end_paragraph();
        }
    }
}

/// Extract the main text: `<main>` / `role="main"`, else the page's outermost
/// `<article>`s, else `<body>`, else the whole document.
fn extract_main(root: &Element) -> Extractor {
    // (elements to read, whether they are content a `<header>` belongs to)
    let mut candidates: Vec<(Vec<&Element>, bool)> = Vec::new();
    let mut main = Vec::new();
    find_outermost(
        root,
        &|e| e.name == "main" || has_role(e, &["main"]),
        &mut main,
    );
    if let Some(first) = main.first() {
        candidates.push((vec![*first], true));
    }
    let mut articles = Vec::new();
    find_outermost(root, &|e| e.name == "article", &mut articles);
    if !articles.is_empty() {
        candidates.push((articles, true));
    }
    if let Some(body) = find_first(root, &|e| e.name == "body") {
        candidates.push((vec![body], false));
    }
    candidates.push((vec![root], false));

    let mut last = Extractor::new(false);
    for (parts, in_content) in candidates {
        let mut x = Extractor::new(in_content);
        for e in parts {
            for child in &e.children {
                match child {
                    Node::Text(t) => x.text(t),
                    Node::Element(c) => x.element(c),
                }
            }
            x.flush();
            x.doc.end_paragraph();
        }
        if !x.is_empty() {
            return x;
        }
        last = x;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::super::{LoaderOptions, SourceInput};
    use super::*;

    fn load_bytes(
        name: &str,
        bytes: &[u8],
        options: &LoaderOptions,
    ) -> Result<(Vec<LoadedDoc>, LoadReport), LoadError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let input = SourceInput {
            path: &path,
            default_title: "page",
            options,
        };
        let mut docs = Vec::new();
        let report = HtmlLoader.load(&input, &mut |d| {
            docs.push(d);
            Ok(())
        })?;
        Ok((docs, report))
    }

    fn load(html: &str) -> Result<LoadedDoc, LoadError> {
        let (mut docs, _) = load_bytes("page.html", html.as_bytes(), &LoaderOptions::default())?;
        assert_eq!(docs.len(), 1);
        Ok(docs.remove(0))
    }

    #[test]
    fn extracts_title_text_description_and_paragraphs() {
        let doc = load(
            r#"<!DOCTYPE html>
<html><head>
  <title>My  &amp; Page</title>
  <meta name="Description" content="A short &quot;summary&quot;.">
  <style>p { color: red }</style>
</head>
<body>
  <p>First   paragraph
     spans lines.</p>
  <p>Second <b>bold</b> <i>text</i>&nbsp;here.</p>
</body></html>"#,
        )
        .unwrap();
        assert_eq!(doc.title, "My & Page");
        assert_eq!(
            doc.text,
            "First paragraph spans lines.\n\nSecond bold text here."
        );
        assert_eq!(
            doc.metadata.get("description"),
            Some(&serde_json::json!("A short \"summary\"."))
        );
        assert!(doc.sections.is_empty());
        assert_eq!(doc.locator, None);
    }

    #[test]
    fn removes_scripts_styles_nav_and_hidden_parts() {
        let doc = load(
            r#"<html><head><script>var x = "<p>not text</p>"; if (a <b) {}</script></head>
<body>
<header><h1>Site banner</h1></header>
<nav><ul><li>Home<li>About</ul></nav>
<script>
  document.write("<div>evil</div>");
</script>
<noscript>Enable JS</noscript>
<div>Visible <span hidden>secret</span><span aria-hidden="true">icon</span> words</div>
<div style="display: none">gone</div>
<form><label>Search</label><input name=q><button>Go</button></form>
<aside>Related links</aside>
<p>Kept &lt;tag&gt; &eacute;t&eacute; &#x263A; &#169;</p>
<footer>Copyright</footer>
</body></html>"#,
        )
        .unwrap();
        assert_eq!(doc.text, "Visible words\n\nKept <tag> été ☺ ©");
        // No <title>: the first <h1> names the page, even in a skipped banner.
        assert_eq!(doc.title, "Site banner");
    }

    #[test]
    fn prefers_main_content_and_marks_heading_sections() {
        let doc = load(
            r#"<html><body>
<div class="sidebar">Sidebar junk</div>
<main>
  <h1>Guide</h1>
  <p>Intro.</p>
  <h2>Install</h2>
  <p>Run it.</p>
  <h3>Linux</h3>
  <ul><li>apt<li>dnf</ul>
  <h2>Use</h2>
  <p>Call it.</p>
</main>
</body></html>"#,
        )
        .unwrap();
        assert!(!doc.text.contains("Sidebar"));
        assert_eq!(
            doc.text,
            "Guide\n\nIntro.\n\nInstall\n\nRun it.\n\nLinux\n\napt\ndnf\n\nUse\n\nCall it."
        );
        let paths: Vec<(String, Vec<String>)> = doc
            .sections
            .iter()
            .map(|s| {
                (
                    doc.text.chars().skip(s.start).take(7).collect(),
                    s.path.clone(),
                )
            })
            .collect();
        assert_eq!(
            paths,
            vec![
                ("Guide\n\n".to_string(), vec!["Guide".to_string()]),
                (
                    "Install".to_string(),
                    vec!["Guide".into(), "Install".into()]
                ),
                (
                    "Linux\n\n".to_string(),
                    vec!["Guide".into(), "Install".into(), "Linux".into()]
                ),
                ("Use\n\nCa".to_string(), vec!["Guide".into(), "Use".into()]),
            ]
        );
        assert_eq!(doc.title, "Guide");
    }

    #[test]
    fn articles_keep_their_header_and_role_main_counts() {
        let doc = load(
            "<body><nav>Menu</nav><article><header><h1>Post</h1></header><p>Body one.</p></article>\
             <article><p>Body two.</p></article><footer>foot</footer></body>",
        )
        .unwrap();
        assert_eq!(doc.text, "Post\n\nBody one.\n\nBody two.");
        let doc =
            load("<body><div>Chrome</div><div role=main><p>Only this</p></div></body>").unwrap();
        assert_eq!(doc.text, "Only this");
    }

    #[test]
    fn keeps_preformatted_text_tables_and_line_breaks() {
        let doc = load(
            "<body><pre>\nfn main() {\n    println!(\"&lt;hi&gt;\");\n}</pre>\
             <p>a<br>b<br><br>c</p>\
             <table><tr><th>Name<th>Age<tr><td>Ada<td>36</table>\
             <dl><dt>Term<dd>Definition</dl></body>",
        )
        .unwrap();
        assert_eq!(
            doc.text,
            "fn main() {\n    println!(\"<hi>\");\n}\n\na\nb\n\nc\n\nName | Age\nAda | 36\n\nTerm\nDefinition"
        );
    }

    #[test]
    fn tolerates_broken_markup() {
        // Unclosed head, stray `<`, mismatched and uppercase tags, unterminated comment.
        let doc =
            load("<HTML><HEAD><TITLE>T</TITLE><P>one < two</DIV><P>three</b> x <!-- open").unwrap();
        assert_eq!(doc.title, "T");
        assert_eq!(doc.text, "one < two\n\nthree x");
        // Deep nesting is flattened, not a stack overflow.
        let deep = format!(
            "<body>{}deep{}</body>",
            "<div><span>".repeat(5000),
            "</span></div>".repeat(5000)
        );
        assert_eq!(load(&deep).unwrap().text, "deep");
    }

    #[test]
    fn falls_back_to_default_title_and_rejects_empty_pages() {
        let doc = load("<p>Just text</p>").unwrap();
        assert_eq!(doc.title, "page");
        assert_eq!(doc.text, "Just text");
        assert_eq!(
            load("<html><head><title>Nothing</title></head><body><script>x()</script><nav>Menu</nav></body></html>"),
            Err(LoadError::Empty)
        );
        assert_eq!(load(" \n "), Err(LoadError::Empty));
        // An empty <main> (filled by script) falls back to the body.
        assert_eq!(
            load("<body><main></main><p>Body text</p></body>")
                .unwrap()
                .text,
            "Body text"
        );
    }

    #[test]
    fn refuses_binary_and_oversized_files_and_decodes_lossily() {
        let options = LoaderOptions::default();
        assert_eq!(
            load_bytes("a.html", b"<p>x\0y</p>", &options).unwrap_err(),
            LoadError::Binary
        );
        let small = LoaderOptions {
            max_file_bytes: 10,
            ..LoaderOptions::default()
        };
        assert_eq!(
            load_bytes("a.html", b"<p>more than ten bytes</p>", &small).unwrap_err(),
            LoadError::TooLarge {
                size: 26,
                limit: 10
            }
        );
        let (docs, report) = load_bytes("a.html", b"<p>caf\xe9 au lait</p>", &options).unwrap();
        assert_eq!(docs[0].text, "caf\u{fffd} au lait");
        assert_eq!(report.warnings.len(), 1);
        assert!(
            report.warnings[0].contains("invalid UTF-8"),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn xhtml_self_closing_and_cdata() {
        let doc = load(
            "<?xml version=\"1.0\"?><html xmlns=\"http://www.w3.org/1999/xhtml\"><body>\
             <div/><p>A<br/>B</p><p><![CDATA[x & y < z]]></p></body></html>",
        )
        .unwrap();
        assert_eq!(doc.text, "A\nB\n\nx & y < z");
    }
}
