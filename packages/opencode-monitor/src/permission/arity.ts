// How many leading words name "the command" for an "always" answer, as opencode 1.18.33's bash
// tool counts them (its BashArity table, read from the shipped binary): `git status -s` → `git status`,
// `npm run dev` → `npm run dev`. Words not listed count as one.
const ARITY = new Map<string, number>(
  Object.entries({
    // one word
    ...listed(
      1,
      "cat cd chmod chown cp echo env export grep kill killall ln ls mkdir mv ps pwd rm rmdir sleep source tail touch unset which",
    ),
    // two words
    ...listed(
      2,
      "bazel brew bun cargo cdk cf cmake composer consul crictl deno docker eksctl firebase flyctl git go gradle helm heroku hugo ip kind kubectl kustomize make mc minikube mongosh mysql mvn ng npm nvm nx openssl pip pipenv pnpm poetry podman psql pulumi pyenv python rake rbenv redis-cli rustup serverless skaffold sls sst swift systemctl terraform tmux turbo ufw vault vercel volta wp yarn",
    ),
    // three words
    ...listed(3, "aws az doctl gcloud gh sfdx"),
    ...listed(
      3,
      "bun run|bun x|cargo add|cargo run|consul kv|deno task|docker builder|docker compose|docker container|docker image|docker network|docker volume|eksctl create|git config|git remote|git stash|ip addr|ip link|ip netns|ip route|kind create|kubectl kustomize|kubectl rollout|mc admin|npm exec|npm init|npm run|npm view|openssl req|openssl x509|pnpm dlx|pnpm exec|pnpm run|podman container|podman image|pulumi stack|terraform workspace|vault auth|vault kv|yarn dlx|yarn run",
    ),
  }),
)

/** Words separated by spaces, or phrases by `|`, each counting `arity` words. */
function listed(arity: number, list: string): Record<string, number> {
  return Object.fromEntries(list.split(list.includes("|") ? "|" : " ").map((phrase) => [phrase, arity]))
}

/** The leading words that name the command: the longest listed phrase decides how many. */
export function arityPrefix(words: readonly string[]): string[] {
  for (let length = words.length; length > 0; length--) {
    const arity = ARITY.get(words.slice(0, length).join(" "))
    if (arity !== undefined) return words.slice(0, arity)
  }
  return words.slice(0, 1)
}
