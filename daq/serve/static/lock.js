"use strict";
// The rig's lock on hil serve's page (daq/serve/locks.py): who holds the rig, since when and why, and the
// button to lock it (an operator, with a note), unlock it (its holder) or break it (an admin). Kept apart
// from app.js: it only needs util.js's api() and the header's place for it.

const rigLock = {state: null, me: null, changes: 0};  // changes: locks and unlocks made on this page

function lockLine(s) {
  const when = s.at ? new Date(s.at * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "";
  return `locked by ${s.by} since ${when}${s.note ? `: ${s.note}` : ""}`;
}

function drawLock() {
  const box = document.getElementById("rig-lock");
  const s = rigLock.state, me = rigLock.me || {};
  if (!box || !s) return;
  box.querySelector(".lock-text").textContent = s.locked ? lockLine(s) : "rig not locked";
  box.classList.toggle("locked", !!s.locked);
  box.querySelector(".lock-text").style.cssText = s.locked ? "color: #a50; font-weight: 600" : "";
  const button = box.querySelector("button"), note = box.querySelector("input");
  const operator = me.role === "operator";
  note.hidden = !!s.locked || !operator;
  if (!s.locked) {
    button.textContent = "lock the rig";
    button.disabled = !operator;
  } else if (s.by === me.name) {
    button.textContent = "unlock";
    button.disabled = false;
  } else {
    button.textContent = "break the lock";
    button.disabled = !me.admin;
    button.title = me.admin ? "" : `only ${s.by} or an admin may unlock it`;
  }
}

async function refreshLock() {
  const changes = rigLock.changes;
  let state, me;
  try {
    [state, me] = await Promise.all([api("GET", "/api/lock"), api("GET", "/api/me")]);
  } catch (e) { return; }
  if (changes !== rigLock.changes) return;  // locked or unlocked here while it was asked: this answer is older
  [rigLock.state, rigLock.me] = [state, me];
  drawLock();
}

async function toggleLock() {
  const s = rigLock.state;
  try {
    if (s && s.locked) {
      if (s.by !== rigLock.me.name && !confirm(`Break ${s.by}'s lock (${s.note || "no note"})? It is recorded.`)) return;
      rigLock.state = await api("DELETE", "/api/lock");
      rigLock.changes++;
    } else {
      const input = document.querySelector("#rig-lock input");
      rigLock.state = await api("POST", "/api/lock", {note: input.value});
      rigLock.changes++;
      input.value = "";
    }
  } catch (e) { alert(e.message); }
  drawLock();
}

(function addLockBox() {
  const box = document.createElement("span");
  box.id = "rig-lock";
  box.innerHTML = '<span class="lock-text muted"></span> <input class="lock-note" placeholder="why (a note)" ' +
    'aria-label="why the rig is locked" hidden> <button type="button" disabled>lock the rig</button>';
  box.querySelector("button").addEventListener("click", toggleLock);
  const header = document.querySelector("header");
  header.insertBefore(box, document.getElementById("me"));
  refreshLock();
  setInterval(refreshLock, 5000);
})();
