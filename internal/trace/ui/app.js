// Live updates of a run page: while the run's current attempt may gain
// turns, follow its event stream (server-sent events) and, a moment after
// each burst of events, replace the attempt's section with the server's
// rendering of it. When the attempt ends, reload if the run went on to
// another attempt.
(function () {
  "use strict";
  var main = document.getElementById("run");
  if (!main || main.dataset.live !== "true") return;
  var section = document.querySelector(".attempt[data-live='true']");
  if (!section) { setTimeout(function () { location.reload(); }, 3000); return; }
  var ns = encodeURIComponent(main.dataset.namespace), name = encodeURIComponent(main.dataset.name);
  var n = section.dataset.attempt;
  var base = "/runs/" + ns + "/" + name + "/attempts/" + n;
  var timer = null, busy = false, again = false;

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(base, { credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(r.status + " " + r.statusText);
      return r.text();
    }).then(function (html) {
      var cur = document.getElementById("attempt-" + n);
      var tmp = document.createElement("div");
      tmp.innerHTML = html;
      var next = tmp.firstElementChild;
      if (cur && next) cur.replaceWith(next);
    }).catch(function (e) { console.warn("refresh:", e); })
      .finally(function () { busy = false; if (again) { again = false; schedule(); } });
  }
  function schedule() { if (!timer) timer = setTimeout(function () { timer = null; refresh(); }, 250); }

  var es = new EventSource("/api/v1/runs/" + ns + "/" + name + "/attempts/" + n + "/events");
  es.onmessage = schedule;
  es.addEventListener("screens", schedule);
  es.addEventListener("end", function () {
    es.close();
    refresh();
    // The run may start a fresh attempt (after STUCK): look again shortly.
    setTimeout(function () {
      fetch("/api/v1/runs/" + ns + "/" + name, { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (run) { if (String(run.attempt) !== String(n) || run.phase !== "Running") location.reload(); });
    }, 2000);
  });
})();
