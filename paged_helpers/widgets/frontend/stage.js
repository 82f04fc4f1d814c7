// The presentation stage, shared by the live story widget and the exported static page.
// A stage covers the whole window; its content is drawn in em, and fitText picks the largest
// font size at which the content fits the stage without scrolling, never below MIN_FONT_PX.

const MIN_FONT_PX = 20; // the smallest text a projector audience is asked to read
const MAX_FONT_PX = 40;
// Below MIN_FONT_PX only as a last resort, for content larger than a demo's bounds allow
// (a CowDemo on a larger pool than the lecture's): smaller type, but nothing cut off.
const LAST_RESORT_FONT_PX = 10;
const NEXT_KEYS = ["PageDown", "ArrowRight", "ArrowDown", " ", "Enter"];
const BACK_KEYS = ["PageUp", "ArrowLeft", "ArrowUp", "Backspace"];
const KERNEL_GONE =
  "\u26a0 The kernel was restarted or stopped: this demo no longer answers. " +
  "Run its cell again (Run \u203a Run All Cells) to bring it back.";
const KERNEL_SILENT =
  "\u26a0 The kernel does not answer (busy, restarted or stopped). " +
  "Wait for it, or run the demo's cell again.";

// What a key (or a clicker, which sends PageDown / PageUp) asks for: "next", "back",
// "restart", "end", "leave" or "" for a key the stage leaves alone.
function keyAction(event) {
  if (event.altKey || event.ctrlKey || event.metaKey) return "";
  if (NEXT_KEYS.includes(event.key)) return "next";
  if (BACK_KEYS.includes(event.key)) return "back";
  if (event.key === "Home") return "restart";
  if (event.key === "End") return "end";
  if (event.key === "Escape") return "leave";
  return "";
}

// Styles a stage element so it covers the window, above everything JupyterLab draws.
function styleStage(node) {
  Object.assign(node.style, {
    position: "fixed",
    inset: "0",
    zIndex: "100000",
    overflow: "hidden",
    outline: "none", // focused for the keys, but a focus ring round the whole screen is noise
    boxSizing: "border-box",
    background: "var(--jp-layout-color0, #ffffff)",
    color: "var(--jp-ui-font-color1, #1f1f1f)",
  });
}

function styleContent(node) {
  Object.assign(node.style, { boxSizing: "border-box", padding: "0.5em 0.8em", width: "100%" });
}

// The largest whole-pixel font size in [lowest, MAX_FONT_PX] at which `content` fits inside
// `stage` (no vertical or horizontal overflow); `lowest` if even that overflows.
function fitText(stage, content, lowest = MIN_FONT_PX) {
  const fits = (size) => {
    content.style.fontSize = `${size}px`;
    return content.scrollHeight <= stage.clientHeight && content.scrollWidth <= stage.clientWidth;
  };
  let low = lowest;
  let high = MAX_FONT_PX;
  if (!fits(low)) {
    content.dataset.fontPx = String(low);
    return low;
  }
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (fits(middle)) low = middle;
    else high = middle - 1;
  }
  content.style.fontSize = `${low}px`;
  content.dataset.fontPx = String(low);
  return low;
}

// A banner that says the kernel is gone, hidden until show(text).
function makeBanner() {
  const banner = document.createElement("div");
  banner.className = "ph-kernel-banner";
  banner.setAttribute("role", "alert");
  banner.hidden = true;
  Object.assign(banner.style, {
    margin: "0.3em 0",
    padding: "0.4em 0.7em",
    border: "0.2em solid var(--jp-warn-color1, #D55E00)",
    borderRadius: "0.3em",
    fontWeight: "700",
    fontSize: "1em",
  });
  return banner;
}

// Calls onGone(true) once the kernel behind `model` is gone, and onGone(false) if it comes back.
// Two signs, because neither is always there: JupyterLab adds .jupyter-widgets-disconnected to
// an ipywidget whose kernel restarted, died or was shut down (seen on an ancestor of `el` when
// this view sits inside an ipywidgets box), and the widget manager's kernel connection reports
// a restart, a death or a lost connection (a restart always loses the kernel's state, so a
// widget of the old kernel never answers again). Returns the function that stops watching.
const GONE_STATUSES = ["restarting", "autorestarting", "dead"];

function watchKernel(el, model, onGone) {
  let gone = false;
  let kernelGone = false;
  const settle = () => {
    const now = kernelGone || Boolean(el.closest(".jupyter-widgets-disconnected"));
    if (now !== gone) {
      gone = now;
      onGone(gone);
    }
  };
  const timer = setInterval(settle, 400);
  const kernel = model?.widget_manager?.kernel;
  const onStatus = (_kernel, status) => {
    if (GONE_STATUSES.includes(status)) kernelGone = true;
    settle();
  };
  const onConnection = (_kernel, status) => {
    if (status === "disconnected") kernelGone = true;
    settle();
  };
  const onDisposed = () => {
    kernelGone = true;
    settle();
  };
  kernel?.statusChanged?.connect(onStatus);
  kernel?.connectionStatusChanged?.connect(onConnection);
  kernel?.disposed?.connect(onDisposed);
  if (kernel?.isDisposed || kernel?.status === "dead") kernelGone = true;
  settle();
  return () => {
    clearInterval(timer);
    kernel?.statusChanged?.disconnect(onStatus);
    kernel?.connectionStatusChanged?.disconnect(onConnection);
    kernel?.disposed?.disconnect(onDisposed);
  };
}
