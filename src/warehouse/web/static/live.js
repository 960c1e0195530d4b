// A little JavaScript: keep job progress live, and a button to copy a PDH.
// Every page works without it.
"use strict";
(function () {
  const base = new URL("../", document.currentScript.src); // .../web/
  const FINISHED = ["complete", "failed", "cancelled"];

  for (const button of document.querySelectorAll("button.copy-button")) {
    const field = document.getElementById(button.dataset.copy);
    if (!field) continue;
    button.hidden = false;
    button.addEventListener("click", async () => {
      field.select();
      try {
        await navigator.clipboard.writeText(field.value);
      } catch (e) {
        document.execCommand("copy");
      }
      button.textContent = "Copied";
    });
  }

  const bars = document.querySelectorAll(".progress[data-job]");
  if (!bars.length) return;
  const ids = [...new Set([...bars].map((b) => b.dataset.job))];

  // The job page's step table, timeline and ETA: fetched again when the counts move.
  async function refreshLive() {
    try {
      const answer = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const selector of ["svg.timeline", "table.steps", "p.eta"]) {
        const now = document.querySelector(selector);
        const next = fresh.querySelector(selector);
        if (now && next) now.replaceWith(document.importNode(next, true));
        else if (!now && next) {
          // The first bar of the timeline: it goes just before the step table.
          document.querySelector("table.steps")?.before(document.importNode(next, true));
        }
      }
    } catch (e) {
      // The next change tries again.
    }
  }

  function show(bar, job) {
    const total = job.steps_done + job.steps_running + job.steps_queued;
    const short = job.state === "failed" || job.state === "cancelled";
    const progress = bar.querySelector("progress");
    progress.max = Math.max(total, short ? job.steps_done + 1 : 1);
    bar.classList.toggle("progress-short", short);
    progress.value = job.steps_done;
    let counts = `${job.steps_done}/${total} done, ${job.steps_running} running, ` +
      `${job.steps_queued} queued`;
    if (job.failed_attempts) counts += `, ${job.failed_attempts} failed attempts`;
    const shown = bar.querySelector(".counts");
    const moved = shown.textContent.replace(/\s+/g, " ").trim() !== counts;
    shown.textContent = counts;
    if (moved && bar.dataset.reload !== undefined) refreshLive();
    const state = bar.querySelector(".state");
    state.textContent = job.state;
    state.className = `state state-${job.state}`;
  }

  async function poll() {
    let again = true; // until every job shown has finished (errors: try again)
    try {
      const url = new URL("jobs/progress.json", base);
      url.searchParams.set("ids", ids.join(","));
      const answer = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (!answer.ok) return;
      const jobs = await answer.json();
      again = false;
      for (const bar of bars) {
        const job = jobs[bar.dataset.job];
        if (!job) continue;
        const was = bar.querySelector(".state").textContent.trim();
        show(bar, job);
        const finished = FINISHED.includes(job.state);
        if (!finished) again = true;
        // A job page shows more once its job ends (output, logs): load it again.
        if (finished && !FINISHED.includes(was) && bar.dataset.reload !== undefined) {
          window.location.reload();
          return;
        }
      }
    } catch (e) {
      again = true;
    } finally {
      if (again) setTimeout(poll, 1000);
    }
  }
  if ([...bars].some((b) => !FINISHED.includes(b.querySelector(".state").textContent.trim()))) {
    setTimeout(poll, 1000);
  }
})();
