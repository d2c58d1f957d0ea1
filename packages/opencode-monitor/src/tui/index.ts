import type { TuiPlugin, TuiPluginApi, TuiPluginModule } from "@opencode-ai/plugin/tui"
import { createComponent, createElement, effect, insert, setProp } from "@opentui/solid"
import { createMemo, createSignal, For, Show } from "solid-js"
import { tuiHostReady } from "../host-check"
import type { MessagePart } from "./from-messages"
import { type LocalSnapshot, safely } from "./local-state"
import {
  colorOf,
  type DialogOption,
  detailDialog,
  listDialog,
  monitorsOfSession,
  REFRESH_MS,
  requestStop,
  type SessionMonitors,
  sessionOfRoute,
  stateFolderOf,
  watchLocalState,
} from "./model"
import { type MonitorView, REMOTE_NOTE, type Row, SIDEBAR_DEFAULTS, sidebarRows } from "./view"

// Only renders (`model.ts` decides), never throws onto the screen; no JSX: an installed `.tsx` entry fails to load.
const ID = "opencode-monitor"

type Screen = { api: TuiPluginApi; folder: string; forSession: (sessionID: string) => SessionMonitors }

function messageParts(api: TuiPluginApi, sessionID: string): MessagePart[] {
  return api.state.session.messages(sessionID).flatMap((message) => {
    const at = (message as { time?: { created?: number } }).time?.created
    return api.state.part(message.id).map((part) => ({ ...(part as unknown as MessagePart), at }))
  })
}

const tui: TuiPlugin = async (api) => {
  if (!tuiHostReady(api)) return
  const folder = stateFolderOf(api.state.path.directory)
  const [snapshot, setSnapshot] = createSignal<LocalSnapshot>({ monitors: [], notes: [], liveServers: [] })
  const [now, setNow] = createSignal(Date.now())
  const unwatch = watchLocalState(folder, setSnapshot)
  const timer = setInterval(() => setNow(Date.now()), REFRESH_MS)
  const screen: Screen = {
    api,
    folder,
    forSession: (sessionID) => monitorsOfSession(snapshot(), sessionID, () => messageParts(api, sessionID), now()),
  }
  const rowsOf = (sessionID: string): Row[] =>
    safely(() => {
      const { monitors, local } = screen.forSession(sessionID)
      return sidebarRows(monitors, { now: now(), ...SIDEBAR_DEFAULTS, note: local ? undefined : REMOTE_NOTE })
    }, [])
  api.slots.register({
    order: 150,
    slots: {
      sidebar_content(_ctx: unknown, props: { session_id: string }) {
        return sidebar(api, () => rowsOf(props.session_id))
      },
    },
  })
  const unregister = api.keymap.registerLayer({
    commands: [
      {
        namespace: "palette",
        name: "opencode-monitor.monitors",
        title: "Monitors",
        desc: "Background monitors of this session: output, status, stop",
        category: "Session",
        slashName: "monitors",
        run: () => safely(() => showList(screen), undefined),
      },
    ],
  } as Parameters<TuiPluginApi["keymap"]["registerLayer"]>[0])
  api.lifecycle.onDispose(() => {
    clearInterval(timer)
    unwatch()
    if (typeof unregister === "function") unregister()
  })
}

function sidebar(api: TuiPluginApi, rowsOf: () => Row[]) {
  const rows = createMemo(rowsOf)
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
            effect(() => setProp(text, "fg", colorOf(api.theme.current, row.tone)))
            insert(text, () => row.text)
            return text
          },
        }),
      )
      return box
    },
  })
}

function showList(screen: Screen): void {
  const { api } = screen
  const sessionID = sessionOfRoute(api.route.current)
  if (!sessionID) {
    api.ui.toast({ variant: "info", title: "Monitors", message: "Open a session first: monitors belong to a session." })
    return
  }
  const dialog = listDialog(screen.forSession(sessionID), Date.now())
  select(api, dialog, (value) => {
    if (dialog.monitors.some((m) => m.id === value)) showDetail(screen, sessionID, value)
  })
}

function showDetail(screen: Screen, sessionID: string, monitorId: string): void {
  const { monitors, local } = screen.forSession(sessionID)
  const monitor = monitors.find((m) => m.id === monitorId)
  if (!monitor) {
    showList(screen)
    return
  }
  select(screen.api, detailDialog(monitor, local, Date.now()), (value) => {
    if (value === "stop") confirmStop(screen, sessionID, monitor)
    else if (value === "refresh") showDetail(screen, sessionID, monitorId)
    else if (value === "back") showList(screen)
  })
}

type Dialog = { title: string; options: DialogOption[]; skipFilter?: boolean }

function select(api: TuiPluginApi, { title, options, skipFilter }: Dialog, onSelect: (value: string) => void): void {
  api.ui.dialog.replace(() =>
    createComponent(api.ui.DialogSelect<string>, { title, options, skipFilter, onSelect: (o) => onSelect(o.value) }),
  )
}

function confirmStop(screen: Screen, sessionID: string, monitor: MonitorView): void {
  const { api } = screen
  api.ui.dialog.replace(() =>
    createComponent(api.ui.DialogConfirm, {
      title: `Stop ${monitor.label}?`,
      message: `Stop monitor ${monitor.id} (${monitor.label})? Its process group gets SIGTERM, then SIGKILL after the grace period. The agent is told, not woken.`,
      onConfirm: () => {
        const { variant, message } = requestStop(screen.folder, sessionID, monitor)
        api.ui.toast({ variant, title: "Monitors", message })
        api.ui.dialog.clear()
      },
      onCancel: () => showDetail(screen, sessionID, monitor.id),
    }),
  )
}

const plugin: TuiPluginModule & { id: string } = { id: ID, tui }
export default plugin
