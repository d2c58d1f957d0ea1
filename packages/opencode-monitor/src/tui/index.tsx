/** @jsxImportSource @opentui/solid */
import type { TuiPlugin, TuiPluginApi, TuiPluginModule } from "@opencode-ai/plugin/tui"
import { createMemo, createSignal, For, Show } from "solid-js"
import type { MessagePart } from "./from-messages"
import type { LocalSnapshot } from "./local-state"
import {
  colorOf,
  detailDialog,
  LocalStateWatch,
  listDialog,
  monitorsOfSession,
  requestStop,
  safely,
  type SessionMonitors,
  sessionOfRoute,
  stateFolderOf,
} from "./model"
import { type MonitorView, REMOTE_NOTE, type Row, SIDEBAR_DEFAULTS, sidebarRows } from "./view"

/**
 * The TUI part of opencode-monitor (SPEC §11): the session's monitors in the sidebar and a
 * "Monitors" palette command. It reads the state files the server part writes (only `src/state/`
 * and the codec are shared with the server part) and falls back to the session's messages when no
 * local server writes one (a TUI attached to a remote server). This file only renders: what it
 * shows is decided in `model.ts`.
 */
const ID = "opencode-monitor"
const REFRESH_MS = 250

function messageParts(api: TuiPluginApi, sessionID: string): MessagePart[] {
  const parts: MessagePart[] = []
  for (const message of api.state.session.messages(sessionID)) {
    const at = (message as { time?: { created?: number } }).time?.created
    for (const part of api.state.part(message.id)) parts.push({ ...(part as unknown as MessagePart), at })
  }
  return parts
}

type Screen = { api: TuiPluginApi; folder: string; forSession: (sessionID: string) => SessionMonitors }

const tui: TuiPlugin = async (api) => {
  const folder = stateFolderOf(api.state.path.directory)
  const [snapshot, setSnapshot] = createSignal<LocalSnapshot>({ monitors: [], notes: [], liveServers: [] })
  const [now, setNow] = createSignal(Date.now())
  const local = new LocalStateWatch(folder, setSnapshot)
  local.refresh()
  const timer = setInterval(() => {
    local.poll()
    setNow(Date.now())
  }, REFRESH_MS)
  api.lifecycle.onDispose(() => {
    clearInterval(timer)
    local.close()
  })
  const screen: Screen = {
    api,
    folder,
    forSession: (sessionID) => monitorsOfSession(snapshot(), sessionID, () => messageParts(api, sessionID), now()),
  }
  const rowsOf = (sessionID: string): Row[] =>
    safely(() => {
      const found = screen.forSession(sessionID)
      const note = found.local || found.monitors.length === 0 ? undefined : REMOTE_NOTE
      return sidebarRows(found.monitors, { now: now(), ...SIDEBAR_DEFAULTS, note })
    }, [])
  api.slots.register({
    order: 150,
    slots: {
      sidebar_content(_ctx, props) {
        return <Sidebar api={api} rows={() => rowsOf(props.session_id)} />
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
    if (typeof unregister === "function") unregister()
  })
}

function Sidebar(props: { api: TuiPluginApi; rows: () => Row[] }) {
  const rows = createMemo(props.rows)
  return (
    <Show when={rows().length > 0}>
      <box>
        <For each={rows()}>
          {(row) => (
            <text fg={colorOf(props.api.theme.current, row.tone)} wrapMode="none">
              {row.text}
            </text>
          )}
        </For>
      </box>
    </Show>
  )
}

function showList(screen: Screen): void {
  const { api } = screen
  const sessionID = sessionOfRoute(api.route.current)
  if (!sessionID) {
    api.ui.toast({ variant: "info", title: "Monitors", message: "Open a session first: monitors belong to a session." })
    return
  }
  const found = screen.forSession(sessionID)
  const dialog = listDialog(found, Date.now())
  api.ui.dialog.replace(() => (
    <api.ui.DialogSelect
      title={dialog.title}
      options={dialog.options}
      onSelect={(option) => {
        const monitor = dialog.monitors.find((m) => m.id === option.value)
        if (monitor) showDetail(screen, sessionID, monitor.id, found.local)
      }}
    />
  ))
}

function showDetail(screen: Screen, sessionID: string, monitorId: string, local: boolean): void {
  const { api } = screen
  const monitor = screen.forSession(sessionID).monitors.find((m) => m.id === monitorId)
  if (!monitor) {
    showList(screen)
    return
  }
  const dialog = detailDialog(monitor, local, Date.now())
  api.ui.dialog.replace(() => (
    <api.ui.DialogSelect
      title={dialog.title}
      skipFilter
      options={dialog.options}
      onSelect={(option) => {
        if (option.value === "stop") confirmStop(screen, sessionID, monitor, local)
        else if (option.value === "refresh") showDetail(screen, sessionID, monitorId, local)
        else if (option.value === "back") showList(screen)
      }}
    />
  ))
}

function confirmStop(screen: Screen, sessionID: string, monitor: MonitorView, local: boolean): void {
  const { api } = screen
  api.ui.dialog.replace(() => (
    <api.ui.DialogConfirm
      title={`Stop ${monitor.label}?`}
      message={`Stop monitor ${monitor.id} (${monitor.label})? Its process group gets SIGTERM, then SIGKILL after the grace period. The agent is told, not woken.`}
      onConfirm={() => {
        const { variant, message } = requestStop(screen.folder, sessionID, monitor)
        api.ui.toast({ variant, title: "Monitors", message })
        api.ui.dialog.clear()
      }}
      onCancel={() => showDetail(screen, sessionID, monitor.id, local)}
    />
  ))
}

const plugin: TuiPluginModule & { id: string } = { id: ID, tui }
export default plugin
