// userturn label: one record at a time, labelled by key. Record text is model-written and untrusted: it is only
// ever put in with textContent (never innerHTML), and the page's Content-Security-Policy allows no inline code.
"use strict";

const $ = (id) => document.getElementById(id);
let state = null;   // labels, n, answered, open, start (api/state)
let index = 0;      // the record shown (state.n: the end)
let item = null;    // the record shown (api/item/I)
let busy = false;   // an action under way (see exclusive): a key held down gives one answer

async function api(path, body) {
  const init = body === undefined ? { cache: "no-store" }
    : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const reply = await fetch(path, init);
  const data = await reply.json().catch(() => ({ error: reply.statusText }));
  if (!reply.ok) throw new Error(data.error || `HTTP ${reply.status}`);
  return data;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function buildLabels() {
  const list = $("labels");
  for (const label of state.labels) {
    const button = element("button");
    button.type = "button";
    button.dataset.label = label.name;
    button.append(element("kbd", "", label.key));
    const name = element("span", "name", label.name.replaceAll("_", " ") + " ");
    name.append(element("span", "short", label.short));
    button.append(name, element("span", "desc", label.description));
    button.addEventListener("click", () => exclusive(() => give(label.name)));
    const entry = element("li");
    entry.append(button);
    list.append(entry);
  }
}

function showProgress() {
  const at = index < state.n ? ` · record ${index + 1} of ${state.n}` : "";
  $("progress").textContent = `${state.answered} of ${state.n} answered${at} · labeller ${state.labeller}`;
}

function render() {
  const done = index >= state.n;
  $("record").hidden = done;
  $("done").hidden = !done;
  $("error").textContent = "";
  showProgress();
  for (const button of $("labels").querySelectorAll("button")) {
    button.classList.toggle("chosen", !done && item.answer !== null && item.answer.label === button.dataset.label);
  }
  if (done) { $("answer").textContent = ""; $("note").value = ""; return; }
  const messages = $("messages");
  messages.replaceChildren();
  for (const message of item.messages) {
    const box = element("div", `message ${message.role}`);
    box.append(element("div", "role", message.role), element("div", "text", message.content));
    messages.append(box);
  }
  const turn = $("user-turn");
  const blank = item.user_turn.trim() === "";
  turn.textContent = !blank ? item.user_turn
    : item.user_turn === "" ? "(empty: the model wrote nothing)"
    : `(only whitespace: ${item.user_turn.length} characters)`;
  turn.classList.toggle("empty", blank);
  const answer = item.answer;
  $("note").value = answer && answer.note ? answer.note : "";
  $("answer").textContent = !answer || (!answer.label && !answer.skipped) ? ""
    : answer.skipped ? "Your answer: skipped" : `Your answer: ${answer.label.replaceAll("_", " ")}`;
}

async function show(at) {
  // the record is fetched before `index` moves: a key always applies to the record on screen
  const next = Math.max(0, Math.min(at, state.n));
  const fetched = next < state.n ? await api(`api/item/${next}`) : null;
  index = next;
  item = fetched;
  render();
  window.scrollTo(0, 0);
}

async function exclusive(action) {
  // one action at a time, from its key to the next record on screen; keys pressed meanwhile are ignored
  if (busy) return;
  busy = true;
  document.body.dataset.busy = "true";
  try {
    await action();
  } catch (error) {
    $("error").textContent = error.message;
  } finally {
    busy = false;
    document.body.dataset.busy = "false";
  }
}

async function send(body) {
  if (index >= state.n) return false;
  try {
    state = await api("api/answer", { index, ...body });
    return true;
  } catch (error) {
    $("error").textContent = `Not saved: ${error.message}`;
    return false;
  }
}

function note() {
  return $("note").value.trim() || null;
}

function nextOpen() {
  // the first record after this one without an answer, else the first one anywhere, else the end
  const after = state.open.find((i) => i > index);
  return after !== undefined ? after : state.start;
}

function forward() {
  // the next record; past the last one, the first without an answer (the end only once every one has one)
  return show(index + 1 < state.n ? index + 1 : state.start);
}

async function give(label) {
  if (await send({ label, note: note() })) await show(nextOpen());
}

async function skip() {
  if (await send({ skipped: true, note: note() })) await show(nextOpen());
}

async function takeBack() {
  if (item && item.answer && (item.answer.label || item.answer.skipped) && await send({ label: null })) {
    await show(index);
  }
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.target === $("note")) {
    if (event.key === "Escape") $("note").blur();
    return;
  }
  const label = state.labels.find((l) => l.key === event.key);
  const actions = {
    ArrowLeft: () => show(index - 1), Backspace: () => show(index - 1), ArrowRight: forward,
    s: skip, u: takeBack, n: () => $("note").focus(),
  };
  const action = label ? () => give(label.name) : actions[event.key.length === 1 ? event.key.toLowerCase() : event.key];
  if (action) {
    event.preventDefault();
    exclusive(action);
  }
}

async function main() {
  try {
    state = await api("api/state");
  } catch (error) {
    $("progress").textContent = `Cannot reach the labelling server: ${error.message}`;
    return;
  }
  buildLabels();
  $("back").addEventListener("click", () => exclusive(() => show(index - 1)));
  $("next").addEventListener("click", () => exclusive(forward));
  $("skip").addEventListener("click", () => exclusive(skip));
  $("undo").addEventListener("click", () => exclusive(takeBack));
  document.addEventListener("keydown", onKey);
  await exclusive(() => show(state.start));
}

main();
