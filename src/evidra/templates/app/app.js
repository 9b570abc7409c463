// evidra serve: upload, search, streamed answers with their cited boxes, an enlargeable page view,
// paging through a document (the arrow keys).
// Every string from the server (answers, names, step text) is set as text, never as HTML.
"use strict";
const COLORS = ["#2563eb", "#db2777", "#ea580c", "#7c3aed", "#0891b2", "#65a30d", "#b45309"];
const ANSWER_COLOR = "#16a34a";
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "style") Object.assign(node.style, value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

const MATCH_COLOR = "#f59e0b";  // a searched word (step -1): no tag
const colorOf = (step) => (step < 0 ? MATCH_COLOR : step === 0 ? ANSWER_COLOR : COLORS[(step - 1) % COLORS.length]);
const tagOf = (step) => (step === 0 ? "A" : String(step));
const plural = (n, word, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;
const docLink = (page) => `/documents/${encodeURIComponent(page.document).replaceAll("%2F", "/")}?page=${page.page}`;
const pct = (v) => `${(100 * v).toFixed(3)}%`;

function drawBox(parent, box, step, frame, tagged = true) {
  // frame: [x0, y0, w, h] of the region shown, in page pixels
  const [fx, fy, fw, fh] = frame;
  const b = el("div", {class: "box", style: {
    left: pct((box[0] - fx) / fw), top: pct((box[1] - fy) / fh),
    width: pct((box[2] - box[0]) / fw), height: pct((box[3] - box[1]) / fh),
  }});
  b.style.setProperty("--c", colorOf(step));
  if (tagged && step >= 0) b.append(el("b", {text: tagOf(step)}));
  parent.append(b);
}

const TAG = {w: 26, h: 20, gap: 4};  // page pixels of a tag on an enlarged page (shown near 1:1)

function marginTags(view, page, marks) {
  // an enlarged page: each box's tag just left of the line it marks (mark.crop starts where the
  // line does, in the column's white margin), level with its box; tags of one line stand side
  // by side, so no tag covers another, a box, or the text a box marks
  const placed = [];  // {top, left} of each tag, page pixels
  const seen = new Set();
  for (const m of [...marks].sort((a, b) => a.box[1] - b.box[1] || a.step - b.step)) {
    const key = `${m.step}:${m.box.join(",")}`;
    if (m.step < 0 || seen.has(key)) continue;
    seen.add(key);
    const top = m.box[1];
    let right = Math.min(m.box[0], (m.crop || m.box)[0]) - TAG.gap;
    for (const p of placed) if (Math.abs(p.top - top) < TAG.h) right = Math.min(right, p.left - TAG.gap);
    placed.push({top, left: right - TAG.w});
    const tag = el("b", {class: "gut", text: tagOf(m.step), style: {
      top: pct(top / page.height), left: pct((right - TAG.w) / page.width), width: pct(TAG.w / page.width),
    }});
    tag.style.setProperty("--c", colorOf(m.step));
    view.append(tag);
  }
}

function pageView(page, marks, enlarged = false) {
  const view = el("div", {class: "pg", style: {aspectRatio: `${page.width} / ${page.height}`}});
  view.append(el("img", {src: page.image, alt: page.label, loading: "lazy"}));
  for (const m of marks) drawBox(view, m.box, m.step, [0, 0, page.width, page.height], !enlarged);
  if (enlarged) marginTags(view, page, marks);
  return view;
}

const CROP_PAD = 8;  // page pixels of margin around a box that comes without its crop

function cropView(page, mark) {
  // the cited region grown to the whole lines it touches, with a margin short of the lines
  // around them (mark.crop: the server read the page's text layer), so no word is cut at either
  // edge; the step's tag is in its heading, so the crop draws the box alone
  const pad = mark.crop ? 0 : CROP_PAD;
  const [x0, y0, x1, y1] = mark.crop || mark.box;
  const cx = Math.max(0, x0 - pad), cy = Math.max(0, y0 - pad);
  const w = Math.max(1, Math.min(page.width, x1 + pad) - cx);
  const h = Math.max(1, Math.min(page.height, y1 + pad) - cy);
  const crop = el("div", {class: "crop", title: "click to enlarge the page", style: {
    aspectRatio: `${w} / ${h}`, width: `${Math.min(640, Math.max(w * 1.25, Math.min(w * 2, 260)))}px`,
  }});
  crop.append(el("img", {src: page.image, alt: page.label, style: {
    width: pct(page.width / w), left: pct(-cx / w), top: pct(-cy / h),
  }}));
  drawBox(crop, mark.box, mark.step, [cx, cy, w, h], false);
  return crop;
}

function openLightbox(page, marks) {
  $("lb-title").textContent = page.label;
  $("lb-open").href = docLink(page);
  const holder = $("lb-page");
  holder.replaceChildren();
  const view = pageView(page, marks, true);
  view.style.width = `min(100% - 48px, ${Math.max(page.width, 900)}px)`;  // the page's own size: text reads as printed
  holder.append(view);
  $("lightbox").hidden = false;
  holder.scrollTop = 0;
  if (marks.length) {  // bring the first cited box to the upper third of the window
    const top = Math.min(...marks.map((m) => m.box[1])) / page.height;
    requestAnimationFrame(() => { holder.scrollTop = top * view.offsetHeight - holder.clientHeight / 3; });
  }
}
function closeLightbox() { if ($("lightbox")) $("lightbox").hidden = true; }

async function* ndjson(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 1);
      if (line.trim()) yield JSON.parse(line);
    }
  }
}

async function failure(response) {
  try { return (await response.json()).error || response.statusText; } catch { return response.statusText; }
}

function pageCard(page, marks, extra) {
  const card = el("div", {class: "card"});
  const view = pageView(page, marks);
  view.addEventListener("click", () => openLightbox(page, marks));
  const meta = el("div", {class: "meta"});
  meta.append(el("a", {href: docLink(page), text: page.label}));
  if (extra) meta.append(el("span", {class: "muted", text: extra}));
  card.append(view, meta);
  return card;
}

function showEvidence(answer) {
  const pages = Object.fromEntries(answer.pages.map((p) => [p.page_id, p]));
  const marks = answer.evidence.filter((e) => e.box && pages[e.page_id]);
  const steps = $("steps");
  steps.replaceChildren();
  for (const e of answer.evidence) {
    const page = pages[e.page_id];
    const item = el("li", {class: "step"});
    const text = el("div");
    const head = el("div", {class: "head"});
    head.append(el("span", {class: "tag", text: tagOf(e.step), style: {background: colorOf(e.step)}}));
    head.append(el("span", {class: "cite", text: e.label ? `${e.label}${e.box ? "" : " · no box"}` : "cites no page shown"}));
    text.append(head, el("div", {text: e.step === 0 ? `Answer: ${e.text}` : e.text}));
    if (page && e.box) {
      const crop = cropView(page, e);
      crop.addEventListener("click", () => openLightbox(page, marks.filter((m) => m.page_id === page.page_id)));
      text.append(crop);
    }
    item.append(text);
    if (page) {
      const thumb = pageView(page, marks.filter((m) => m.page_id === page.page_id));
      thumb.title = "click to enlarge";
      thumb.addEventListener("click", () => openLightbox(page, marks.filter((m) => m.page_id === page.page_id)));
      item.append(thumb);
    }
    steps.append(item);
  }
  $("steps-title").hidden = answer.evidence.length === 0;
  const grid = $("pages");
  // "image N": the model was shown the pages in this order, and its raw output cites them so
  grid.replaceChildren(...answer.pages.map((p, i) => pageCard(p, marks.filter((m) => m.page_id === p.page_id), `shown to the model as image ${i + 1}`)));
  $("pages-title").hidden = answer.pages.length === 0;
}

// The conversation so far: earlier questions and answers, sent as the history of a follow-up;
// the server keeps each answer in it (conversationId), so a reload or a restart reopens it (?c=).
let conversation = [];
let conversationId = null;
const KEPT_ID = /^[0-9a-f]{32}$/;

function showTurns() {
  const turns = $("turns");
  turns.replaceChildren(...conversation.map((m) => el("li", {class: m.role, text: m.content})));
  turns.hidden = conversation.length === 0;
}

function ask(event) {
  event.preventDefault();
  conversation = [];
  conversationId = null;
  return answer($("question").value.trim());
}

function followUp(event) {
  event.preventDefault();
  const box = $("follow-question");
  const question = box.value.trim();
  box.value = "";
  return answer(question);
}

function replyText(e) {
  // what the model reads of an earlier answer: the answer and the pages it cites
  const labels = [...new Set(e.evidence.map((x) => x.label).filter(Boolean))];
  return `${e.answer ?? "(no answer)"}${labels.length ? `\n\nSources: ${labels.join("; ")}` : ""}`;
}

async function answer(question) {
  if (!question) return;
  const history = conversation.slice();
  showTurns();
  $("asked").textContent = question;
  $("follow").hidden = true;
  $("results").hidden = true;
  $("hint").hidden = true;
  $("answer").hidden = false;
  $("final").hidden = true;
  $("raw").textContent = "";
  $("raw-box").open = true;
  $("raw-box").hidden = false;
  $("timing").textContent = "";
  $("steps").replaceChildren();
  $("pages").replaceChildren();
  $("steps-title").hidden = $("pages-title").hidden = true;
  $("exports").hidden = true;
  $("status").textContent = "Searching…";
  $("ask-button").disabled = true;
  let first = null;
  try {
    const response = await fetch("/api/ask", {method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({question, k: Number($("k").value), history, conversation: conversationId ?? undefined})});
    if (!response.ok) throw new Error(await failure(response));
    for await (const e of ndjson(response)) {
      if (e.type === "pages") {
        $("status").textContent = `Reading ${e.pages.map((p) => p.label).join(", ")}…`;
      } else if (e.type === "token") {
        if (first === null) first = e.ms;
        $("raw").textContent += e.text;
        $("timing").textContent = `first token after ${first} ms`;
      } else if (e.type === "answer") {
        showAnswer(e);
        $("timing").textContent = `first token after ${first ?? "-"} ms, done after ${e.ms} ms`;
        conversation = [...history, {role: "user", content: question}, {role: "assistant", content: replyText(e)}];
        if (e.conversation) {
          conversationId = e.conversation;
          window.history.replaceState(null, "", `/?c=${conversationId}`);
          showExports(e.turn);
          refreshConversations();
        } else if (e.not_kept) {
          $("status").textContent += ` (not kept: ${e.not_kept})`;
        }
      } else if (e.type === "error") {
        throw new Error(e.error);
      }
    }
  } catch (err) {
    $("status").textContent = String(err.message || err);
    $("status").className = "status bad";
    return;
  } finally {
    $("ask-button").disabled = document.body.dataset.noModel === "1";
  }
  $("status").className = "status";
}

function showAnswer(e) {
  // a new answer, or a kept one reopened: headline it only when it parsed; otherwise say so,
  // the raw text folded below
  $("answer").hidden = false;
  $("hint").hidden = true;
  $("status").textContent = e.errors.length ? `Format: ${e.errors.join("; ")}` : "";
  $("status").className = "status";
  const said = e.parsed ? e.answer : e.no_hits ? `No answer: ${e.notice}.` : "The model's answer could not be read.";
  $("answer-text").textContent = said;
  $("answer-text").classList.toggle("unreadable", !e.parsed);
  $("raw").textContent = e.output;
  $("raw-box").open = e.parsed;
  $("raw-box").hidden = e.no_hits;
  $("final").hidden = false;
  showEvidence(e);
  $("follow").hidden = false;
}

function showExports(turn) {
  const base = `/api/conversations/${conversationId}/turns/${turn}/export`;
  $("export-html").href = `${base}?format=html`;
  $("export-md").href = `${base}?format=md`;
  $("exports").hidden = false;
}

async function reopen(id) {
  // a kept conversation drawn again: the earlier turns as questions and answers, the last in full
  const response = await fetch(`/api/conversations/${id}`);
  if (!response.ok) {
    window.history.replaceState(null, "", "/");
    $("hint").hidden = false;
    return;
  }
  const kept = await response.json();
  const turns = kept.turns;
  if (!turns.length) return;
  conversationId = kept.id;
  conversation = turns.slice(0, -1).flatMap((t) => [{role: "user", content: t.question}, {role: "assistant", content: replyText(t)}]);
  showTurns();
  const last = turns[turns.length - 1];
  $("asked").textContent = last.question;
  $("results").hidden = true;
  showAnswer(last);
  $("timing").textContent = `kept ${new Date(1000 * last.created).toLocaleString()}`;
  conversation = [...conversation, {role: "user", content: last.question}, {role: "assistant", content: replyText(last)}];
  showExports(last.turn);
}

async function refreshConversations() {
  const list = $("convs");
  if (!list) return;
  const response = await fetch("/api/conversations");
  if (!response.ok) return;
  const {conversations} = await response.json();
  $("conv-count").textContent = conversations.length;
  if (!conversations.length) {
    list.replaceChildren(el("li", {class: "muted empty", text: "Questions you ask are kept here."}));
    return;
  }
  list.replaceChildren(...conversations.map((c) => {
    const li = el("li", {class: c.id === conversationId ? "here" : ""});
    const open = el("a", {href: `/?c=${c.id}`, text: c.title, title: `${plural(c.turns, "answer")}, ${new Date(1000 * c.updated).toLocaleString()}`});
    const drop = el("button", {type: "button", class: "forget", title: "delete this conversation", text: "✕"});
    drop.addEventListener("click", () => forget(c.id));
    li.append(open, drop);
    return li;
  }));
}

async function forget(id) {
  const response = await fetch(`/api/conversations/${id}`, {method: "DELETE"});
  if (!response.ok) return;
  if (id === conversationId) {
    conversationId = null;
    conversation = [];
    window.history.replaceState(null, "", "/");
    $("answer").hidden = true;
    $("hint").hidden = false;
  }
  await refreshConversations();
}

async function search() {
  const q = $("question").value.trim();
  if (!q) return;
  $("answer").hidden = true;
  $("hint").hidden = true;
  const response = await fetch(`/api/search?q=${encodeURIComponent(q)}&k=12`);
  const body = response.ok ? await response.json() : {error: await failure(response)};
  $("results").hidden = false;
  if (body.error) { $("results-title").textContent = body.error; $("hits").replaceChildren(); return; }
  $("results-title").textContent = body.hits.length
    ? `${plural(body.hits.length, "page")} for “${body.query}” (${body.ms} ms)` : `No page matches “${body.query}”`;
  $("hits").replaceChildren(...body.hits.map(searchCard));
}

function searchCard(hit) {
  // the line of the first matched word, readable, above the page with every match marked
  const marks = hit.matches.map((box) => ({box, step: -1}));
  const card = el("div", {class: "card hit"});
  const meta = el("div", {class: "meta"});
  meta.append(el("a", {href: docLink(hit), text: hit.label}), el("span", {class: "muted", text: `score ${hit.score} · ${plural(hit.matches.length, "match", "matches")}`}));
  card.append(meta);
  if (marks.length) {
    const crop = cropView(hit, {...marks[0], crop: hit.crop});  // the first match's whole line
    crop.addEventListener("click", () => openLightbox(hit, marks));
    card.append(crop);
  }
  const view = pageView(hit, marks);
  view.classList.add("thumb");
  view.addEventListener("click", () => openLightbox(hit, marks));
  card.append(view);
  return card;
}

async function refreshDocuments() {
  const response = await fetch("/api/documents");
  if (!response.ok) return;
  const {documents} = await response.json();
  $("doc-count").textContent = documents.length;
  $("docs").replaceChildren(...documents.map((d) => {
    const li = el("li");
    li.append(el("a", {href: `/documents/${encodeURIComponent(d.source).replaceAll("%2F", "/")}`, text: d.source}),
              el("span", {class: "muted", text: `${d.pages} p.`}));
    return li;
  }));
}

// Uploads, one file at a time: its bytes are sent (202: the server made it a job), then the job
// is followed as the server reads and indexes it, until it ends. A busy server (503) is asked
// again after its Retry-After. Cancel stops the file in flight (its upload or its job) and the rest.
const ENDED = new Set(["done", "failed", "cancelled"]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let batch = null;  // the files being added: {stop, job (the id followed), xhr (the upload being sent)}

function setBar(fraction) {
  $("bar").parentElement.classList.remove("busy");
  $("bar").style.width = pct(Math.min(1, fraction));
}

function send(file, name, onBytes) {
  return new Promise((resolve) => {
    const xhr = new XMLHttpRequest();
    batch.xhr = xhr;
    xhr.open("POST", `/api/upload?name=${encodeURIComponent(name)}`);
    xhr.upload.onprogress = (e) => onBytes(e.loaded);
    xhr.onload = () => {
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch { body = {error: xhr.statusText}; }
      resolve({status: xhr.status, body, wait: Number(xhr.getResponseHeader("Retry-After")) || 2});
    };
    xhr.onerror = () => resolve({status: 0, body: {error: "the connection failed"}});
    xhr.onabort = () => resolve({status: 0, body: {error: "cancelled"}});
    xhr.send(file);
  });
}

async function cancelJob(id) {
  await fetch(`/api/uploads/${encodeURIComponent(id)}`, {method: "DELETE"});
}

async function follow(job, onJob) {
  batch.job = job.id;
  if (batch.stop) await cancelJob(job.id);  // Cancel came while the server answered the upload
  while (!ENDED.has(job.state)) {
    await sleep(250);
    const response = await fetch(`/api/uploads/${encodeURIComponent(job.id)}`);
    if (!response.ok) return {error: await failure(response)};
    job = await response.json();
    onJob(job);
  }
  batch.job = null;
  return job;
}

async function uploadOne(file, name, where) {
  const onBytes = (n) => {
    setBar(n / (file.size || 1));
    $("progress-text").textContent = `Uploading ${where}`;
  };
  const onJob = (job) => {
    if (job.state === "indexing") {
      setBar(job.index_total ? job.index_done / job.index_total : 1);
      $("progress-text").textContent = `Indexing ${where}: ${job.index_done} of ${job.index_total} pages`;
    } else if (!ENDED.has(job.state)) {
      $("bar").parentElement.classList.add("busy");
      const read = job.state === "queued" ? "waiting for the upload before it" : `${plural(job.pages_done, "page")} read`;
      $("progress-text").textContent = `Reading ${where}: ${job.cancel_requested ? "cancelling…" : read}`;
    }
  };
  for (;;) {
    const sent = await send(file, name, onBytes);
    if (batch.stop) return sent.status === 202 ? follow(sent.body, onJob) : {state: "cancelled"};
    if (sent.status === 503) {
      $("progress-text").textContent = `The server is busy with other uploads; ${name} is sent again in ${sent.wait} s`;
      await sleep(1000 * sent.wait);
      continue;
    }
    if (sent.status !== 202) return {error: sent.body.error || `HTTP ${sent.status}`};
    onJob(sent.body);
    return follow(sent.body, onJob);
  }
}

function resultLine(name, file, result) {
  const why = (reason) => (reason.startsWith(file.name) ? reason : `${name}: ${reason}`);
  if (result.error) return [why(result.error), "bad"];
  if (result.state === "cancelled") return [`${name}: cancelled, nothing added`, "bad"];
  if (result.state === "failed") return [why(result.failed[0]?.reason || result.error || "not read"), "bad"];
  const again = result.unchanged ? `, ${result.unchanged} already here` : "";
  return [`${name}: ${plural(result.added, "page")} added${again}`, "ok"];
}

async function addDocuments(files) {
  files = [...files];
  if (!files.length || batch) return;
  batch = {stop: false, job: null, xhr: null};
  const log = $("upload-log");
  $("progress").hidden = false;
  $("cancel-upload").hidden = false;
  $("cancel-upload").disabled = false;
  log.replaceChildren();
  let added = 0, indexed = 0, bad = 0, stopped = 0;
  for (const [i, file] of files.entries()) {
    const name = file.webkitRelativePath || file.name;
    if (batch.stop) { stopped++; continue; }
    const result = await uploadOne(file, name, `${i + 1} of ${files.length}: ${name}`);
    const [line, cls] = resultLine(name, file, result);
    if (result.state === "cancelled") stopped++;
    else if (cls === "bad") bad++;
    added += result.added || 0;
    indexed += result.indexed || 0;
    log.append(el("li", {class: cls, text: line}));
  }
  setBar(1);
  const notRead = bad ? `, ${plural(bad, "file")} not read (see below)` : "";
  const notDone = stopped ? `, ${plural(stopped, "file")} cancelled` : "";
  const how = batch.stop ? "Cancelled" : "Done";
  $("progress-text").textContent = `${how}: ${plural(added, "page")} added, ${indexed} indexed${notRead}${notDone}.`;
  $("cancel-upload").hidden = true;
  batch = null;
  await refreshDocuments();
}

async function cancelUploads() {
  if (!batch || batch.stop) return;
  batch.stop = true;
  $("cancel-upload").disabled = true;
  $("progress-text").textContent = "Cancelling…";
  if (batch.xhr) batch.xhr.abort();  // a finished upload ignores it
  if (batch.job) await cancelJob(batch.job);
}

function pageKeys(e) {
  // on a document's page: the arrow keys go to the previous and next page
  if (e.key === "Escape") closeLightbox();
  const to = {ArrowLeft: "prev", ArrowRight: "next"}[e.key];
  const link = to && !["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName) && $(to);
  if (link) link.click();
}

document.addEventListener("DOMContentLoaded", () => {
  if ($("ask-button")?.disabled) document.body.dataset.noModel = "1";
  $("ask")?.addEventListener("submit", ask);
  $("follow")?.addEventListener("submit", followUp);
  $("search-button")?.addEventListener("click", search);
  for (const id of ["files", "folder"]) {  // emptied once read, so the same file can be chosen again
    $(id)?.addEventListener("change", (e) => { const files = [...e.target.files]; e.target.value = ""; addDocuments(files); });
  }
  $("cancel-upload")?.addEventListener("click", cancelUploads);
  const drop = $("drop");
  drop?.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop?.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop?.addEventListener("drop", (e) => { e.preventDefault(); drop.classList.remove("over"); addDocuments(e.dataTransfer.files); });
  if ($("convs")) {
    const kept = new URLSearchParams(window.location.search).get("c");
    if (kept && KEPT_ID.test(kept)) conversationId = kept;
    refreshConversations();
    if (conversationId) reopen(conversationId);
  }
  $("lb-close")?.addEventListener("click", closeLightbox);
  $("lightbox")?.addEventListener("click", (e) => { if (e.target.id === "lightbox" || e.target.id === "lb-page") closeLightbox(); });
  document.addEventListener("keydown", pageKeys);
});
