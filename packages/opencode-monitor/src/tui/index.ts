import type { TuiPlugin, TuiPluginApi, TuiPluginModule } from "@opencode-ai/plugin/tui"
import { createComponent, createElement, effect, insert, setProp } from "@opentui/solid"
import { type FSWatcher, watch } from "node:fs"
import { createMemo, createSignal, For, Show } from "solid-js"
import { tuiHostReady } from "../host-check"
import { projectStateDir } from "../state/format"
import { writeStopRequest } from "../state/stop-requests"
import { type MessagePart, monitorsFromMessages } from "./from-messages"
import { type LocalSnapshot, readLocalState, withRemembered } from "./local-state"
import {
  type MonitorView,
  ordered,
  REMOTE_NOTE,
  type Row,
  SIDEBAR_DEFAULTS,
  sidebarRows,
  type Tone,
  dialogOption,
  detailRows,
} from "./view"

/**
 * The TUI part of opencode-monitor (SPEC §11): the session's monitors in the sidebar and a
 * "Monitors" palette command. It reads the state files the server part writes (only `src/state/`
 * is shared with the server part) and falls back to the session's messages when no local server
 * writes one (a TUI attached to a remote server). Nothing here may throw onto the screen.
 *
 * No JSX: opencode compiles a TUI plugin's JSX only outside node_modules, so a `.tsx` entry fails to
 * load once installed as a package (`Cannot find module '@opentui/solid/jsx-dev-runtime'`). The
 * views are built with @opentui/solid's element calls, which opencode maps to its own runtime in
 * any plugin file that imports them; props that change are getters, as Solid's compiler writes them.
 */
const ID = "opencode-monitor"
const REFRESH_MS = 250
/** How long a monitor seen in the messages waits for a local state record before the fallback shows it. */
const FALLBACK_GRACE_MS = 2_000
const DETAIL_WIDTH = 100

type SessionMonitors = { monitors: MonitorView[]; local: boolean; notes: string[] }

function safely<T>(fn: () => T, fallback: T): T {
  try {
    return fn()
  } catch {
    return fallback
  }
}

function messageParts(api: TuiPluginApi, sessionID: string): MessagePart[] {
  const parts: MessagePart[] = []
  for (const message of api.state.session.messages(sessionID)) {
    const at = (message as { time?: { created?: number } }).time?.created
    for (const part of api.state.part(message.id)) parts.push({ ...(part as unknown as MessagePart), at })
  }
  return parts
}

const tui: TuiPlugin = async (api) => {
  if (!tuiHostReady(api)) return
  const projectDir = safely(() => projectStateDir(api.state.path.directory), "")
  const empty: LocalSnapshot = { monitors: [], notes: [], liveServers: [] }
  const [snapshot, setSnapshot] = createSignal<LocalSnapshot>(empty)
  const [now, setNow] = createSignal(Date.now())
  let lastText = ""
  const seen = new Map<string, MonitorView>()
  const refresh = () => {
    const read = projectDir ? safely(() => readLocalState(projectDir), empty) : empty
    const next = { ...read, monitors: safely(() => withRemembered(seen, read.monitors), read.monitors) }
    const text = safely(() => JSON.stringify(next), "")
    if (text !== lastText) {
      lastText = text
      setSnapshot(next)
    }
    setNow(Date.now())
  }
  // The poll keeps the elapsed times ticking and finds the folder once it exists; the watch makes
  // a new record show at once (the server writes at most ~4 times a second).
  let watcher: FSWatcher | undefined
  const watchFolder = () => {
    if (watcher || !projectDir) return
    try {
      watcher = watch(projectDir, () => refresh())
      watcher.on("error", () => {
        watcher?.close()
        watcher = undefined
      })
    } catch {
      // Not there yet.
    }
  }
  refresh()
  const timer = setInterval(() => {
    watchFolder()
    refresh()
  }, REFRESH_MS)
  api.lifecycle.onDispose(() => {
    clearInterval(timer)
    watcher?.close()
  })

  const forSession = (sessionID: string): SessionMonitors =>
    safely(
      () => {
        const snap = snapshot()
        if (snap.liveServers.length > 0 || snap.monitors.some((m) => m.sessionID === sessionID)) {
          return { monitors: snap.monitors.filter((m) => m.sessionID === sessionID), local: true, notes: snap.notes }
        }
        // A local server writes its record within a second of a start; until then (or for a remote
        // server, for good) the session's messages are all there is.
        const fromMessages = monitorsFromMessages(sessionID, messageParts(api, sessionID), now())
        const settled = fromMessages.filter((m) => now() - m.startedAt >= FALLBACK_GRACE_MS)
        return { monitors: settled, local: false, notes: snap.notes }
      },
      { monitors: [], local: false, notes: [] },
    )

  const color = (tone: Tone) => {
    const theme = api.theme.current
    switch (tone) {
      case "title":
        return theme.text
      case "running":
        return theme.info
      case "success":
        return theme.success
      case "error":
        return theme.error
      case "warning":
        return theme.warning
      case "muted":
        return theme.textMuted
      default:
        return theme.text
    }
  }

  function Sidebar(props: { sessionID: string }) {
    const rows = createMemo<Row[]>(() =>
      safely(() => {
        const found = forSession(props.sessionID)
        return sidebarRows(found.monitors, {
          now: now(),
          ...SIDEBAR_DEFAULTS,
          note: found.local || found.monitors.length === 0 ? undefined : REMOTE_NOTE,
        })
      }, []),
    )
    return createComponent(Show, {
      get when() {
        return rows().length > 0
      },
      get children() {
        const box = createElement("box")
        insert(
          box,
          createComponent(For, {
            get each() {
              return rows()
            },
            children: (row: Row) => {
              const text = createElement("text")
              setProp(text, "wrapMode", "none")
              effect(() => setProp(text, "fg", color(row.tone)))
              insert(text, () => row.text)
              return text
            },
          }),
        )
        return box
      },
    })
  }

  api.slots.register({
    order: 150,
    slots: {
      sidebar_content(_ctx: unknown, props: { session_id: string }) {
        return createComponent(Sidebar, {
          get sessionID() {
            return props.session_id
          },
        })
      },
    },
  })

  const currentSession = (): string | undefined => {
    const route = api.route.current
    if (route.name !== "session") return undefined
    const id = (route.params as { sessionID?: unknown } | undefined)?.sessionID
    return typeof id === "string" ? id : undefined
  }

  const showList = () => {
    const sessionID = currentSession()
    if (!sessionID) {
      api.ui.toast({
        variant: "info",
        title: "Monitors",
        message: "Open a session first: monitors belong to a session.",
      })
      return
    }
    const found = forSession(sessionID)
    const t = Date.now()
    const monitors = ordered(found.monitors)
    const notes = [...found.notes, ...(found.local ? [] : monitors.length > 0 ? [REMOTE_NOTE] : [])]
    api.ui.dialog.replace(() =>
      createComponent(api.ui.DialogSelect<string>, {
        title: monitors.length === 0 ? "Monitors: none in this session" : "Monitors",
        options: [
          ...monitors.map((monitor) => ({ ...dialogOption(monitor, t), value: monitor.id })),
          ...notes.map((note) => ({ title: note, value: `note:${note}`, category: "Notes" })),
        ],
        onSelect: (option) => {
          const monitor = monitors.find((m) => m.id === option.value)
          if (monitor) showDetail(sessionID, monitor.id, found.local)
        },
      }),
    )
  }

  const showDetail = (sessionID: string, monitorId: string, local: boolean) => {
    const monitor = forSession(sessionID).monitors.find((m) => m.id === monitorId)
    if (!monitor) return showList()
    const rows = detailRows(monitor, Date.now(), DETAIL_WIDTH)
    const canStop = local && monitor.statusKind === "running" && monitor.serverPid !== undefined
    const actions = [
      ...(canStop
        ? [{ title: "Stop", value: "stop", description: "SIGTERM to its process group, SIGKILL after the grace" }]
        : []),
      { title: "Refresh", value: "refresh" },
      { title: "Back", value: "back" },
    ]
    const stopNote =
      !local && monitor.statusKind === "running"
        ? ["Stop is not available: this TUI is not on the server's machine."]
        : []
    api.ui.dialog.replace(() =>
      createComponent(api.ui.DialogSelect<string>, {
        title: rows[0]?.text ?? monitorId,
        skipFilter: true,
        options: [
          ...actions.map((a) => ({ ...a, category: "Actions" })),
          ...[...rows.slice(1), ...stopNote.map((text) => ({ text }))]
            .filter((row) => row.text !== "")
            .map((row, index) => ({ title: row.text, value: `row:${index}`, category: "Monitor" })),
        ],
        onSelect: (option) => {
          if (option.value === "stop") confirmStop(sessionID, monitor, local)
          else if (option.value === "refresh") showDetail(sessionID, monitorId, local)
          else if (option.value === "back") showList()
        },
      }),
    )
  }

  const confirmStop = (sessionID: string, monitor: MonitorView, local: boolean) => {
    api.ui.dialog.replace(() =>
      createComponent(api.ui.DialogConfirm, {
        title: `Stop ${monitor.label}?`,
        message: `Stop monitor ${monitor.id} (${monitor.label})? Its process group gets SIGTERM, then SIGKILL after the grace period. The agent is told, not woken.`,
        onConfirm: () => {
          try {
            writeStopRequest(projectDir, { serverPid: monitor.serverPid ?? 0, sessionID, monitorId: monitor.id })
            api.ui.toast({
              variant: "info",
              title: "Monitors",
              message: `Stop requested: ${monitor.label} (${monitor.id})`,
            })
          } catch (error) {
            api.ui.toast({
              variant: "error",
              title: "Monitors",
              message: `Could not request the stop (${error instanceof Error ? error.message : String(error)}); ask the agent to call monitor_stop.`,
            })
          }
          api.ui.dialog.clear()
        },
        onCancel: () => showDetail(sessionID, monitor.id, local),
      }),
    )
  }

  const unregister = api.keymap.registerLayer({
    commands: [
      {
        namespace: "palette",
        name: "opencode-monitor.monitors",
        title: "Monitors",
        desc: "Background monitors of this session: output, status, stop",
        category: "Session",
        slashName: "monitors",
        run: () => safely(showList, undefined),
      },
    ],
  } as Parameters<TuiPluginApi["keymap"]["registerLayer"]>[0])
  api.lifecycle.onDispose(() => {
    if (typeof unregister === "function") unregister()
  })
}

const plugin: TuiPluginModule & { id: string } = { id: ID, tui }
export default plugin
