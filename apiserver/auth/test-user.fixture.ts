import { providerUser, type RequestUser } from "./user.ts"

/** A GitHub user for tests: `nick` names every field, `groups` are their Groups. */
export const testUser = (nick: string, groups: readonly string[] = []): RequestUser =>
  providerUser({
    UserID: `id-${nick}`,
    Email: `${nick}@example.com`,
    Name: nick,
    NickName: nick,
    Provider: "github",
    Organizations: [],
    Groups: groups,
  })
